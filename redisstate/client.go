package redisstate

import (
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultCallTimeout is the deadline of one Redis round trip when a
// Config's CallTimeout is 0, as Envoy's rate-limit client uses.
const DefaultCallTimeout = 20 * time.Millisecond

// NewClient returns a go-redis UniversalClient set up for this package:
// a single server, Sentinel or Cluster client, as go-redis chooses from
// opts. ContextTimeoutEnabled is set, so a call's deadline bounds its
// socket reads and writes. MaxRetries is off, so a failed call is not tried
// again. Dial, read and write timeouts are 100 ms unless opts sets them.
// Each round trip ends at the earlier of its CallTimeout and these
// timeouts, so a CallTimeout above 100 ms needs longer ReadTimeout and
// WriteTimeout in opts. opts is copied, not modified. NewClient panics if
// opts is nil.
func NewClient(opts *redis.UniversalOptions) redis.UniversalClient {
	if opts == nil {
		panic("redisstate: nil UniversalOptions")
	}
	o := *opts
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	if o.DialerRetries == 0 {
		// go-redis dials 5 times, 100 ms apart, by default: a refused
		// connection is the guard's business, not the pool's.
		o.DialerRetries = 1
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 100 * time.Millisecond
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 100 * time.Millisecond
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 100 * time.Millisecond
	}
	return redis.NewUniversalClient(&o)
}

// checkClient reports a client that would not honour the per-call
// deadline, naming field, what holds it ("Config.Redis.Client").
func checkClient(field string, c redis.UniversalClient) error {
	if c == nil || nilPointer(c) {
		return errorf("%s must be set", field)
	}
	switch x := c.(type) {
	case *redis.Client:
		if !x.Options().ContextTimeoutEnabled {
			return errorf("%s: ContextTimeoutEnabled must be set, or a frozen Redis hangs calls past CallTimeout (build it with NewClient)", field)
		}
	case *redis.ClusterClient:
		if !x.Options().ContextTimeoutEnabled {
			return errorf("%s: ContextTimeoutEnabled must be set, or a frozen Redis hangs calls past CallTimeout (build it with NewClient)", field)
		}
	}
	return nil
}

// nilPointer reports whether v holds a nil pointer, such as a
// (*redis.Client)(nil): v != nil, yet any method call on it would panic.
func nilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
