package keyed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/nilcheck"
	"github.com/watertight/watertight/policy"
)

// DefaultMaxKeyLen is Config.MaxKeyLen's default, in bytes.
const DefaultMaxKeyLen = 256

// Config configures a [Group]. Its zero value is not valid: New and
// MaxKeys must be set. [NewGroup] copies it.
type Config struct {
	// Name names the Group in errors and telemetry. Empty is allowed.
	Name string

	// New builds the policy of key on its first call, and again after it
	// was evicted. label is key if key is in Labels, else [LabelOther]:
	// name the policy by label, not by key, to keep telemetry bounded. It
	// must not be nil. It may be called for one key twice at once; the
	// policy built second is closed unused.
	New func(key, label string) (policy.Policy, error)

	// Key returns the key of the call made with ctx. Nil means
	// policy.KeyOf.
	Key func(ctx context.Context) string

	// MaxKeys is the most policies live at once. It must be >= 1.
	MaxKeys int

	// MinIdle is how long a key's calls must all have been over before a
	// new key may evict its policy. 0 means as soon as they are over.
	// It must be >= 0.
	MinIdle time.Duration

	// MaxKeyLen is the longest key, in bytes, that gets a policy. 0 means
	// DefaultMaxKeyLen. It must be >= 0.
	MaxKeyLen int

	// Rest, if not nil, runs the calls that get no policy of their own
	// (see the package doc). Nil rejects them.
	Rest policy.Policy

	// Labels are the keys that may name their policy in telemetry.
	Labels []string

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called once for every rejection, on the
	// rejected caller's goroutine with its ctx, holding no lock. It must
	// not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError)
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	switch {
	case c.New == nil:
		return errors.New("keyed: Config.New must not be nil: it builds each key's policy")
	case c.MaxKeys < 1:
		return fmt.Errorf("keyed: Config.MaxKeys must be >= 1, got %d", c.MaxKeys)
	case c.MinIdle < 0:
		return fmt.Errorf("keyed: Config.MinIdle must be >= 0, got %v", c.MinIdle)
	case c.MaxKeyLen < 0:
		return fmt.Errorf("keyed: Config.MaxKeyLen must be >= 0, got %d", c.MaxKeyLen)
	case nilcheck.Pointer(c.Rest):
		return fmt.Errorf("keyed: Config.Rest is a nil %T; leave it nil to reject the calls it would run", c.Rest)
	}
	return nil
}
