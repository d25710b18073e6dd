package bulkhead

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/policy"
)

// Unbounded, as Config.MaxQueue, lets any number of callers wait for a slot.
const Unbounded = -1

// Config configures a [Bulkhead]. The zero value is not valid: Limit must
// be set. [New] copies it.
//
// Config reads and writes JSON: {"limit": 10, "max_queue": 20,
// "max_wait": "1s", "reserve": {"critical": 2}}. The keys are the json
// tags, durations are Go duration strings and priorities are named; zero
// fields are left out. MeterProvider and OnReject are not data: they are
// neither written nor read.
type Config struct {
	// Name names the bulkhead in errors and telemetry. Empty is allowed.
	Name string `json:"name"`

	// Limit is the number of calls that may run at once. It is required and
	// must be >= 1; math.MaxInt is allowed.
	Limit int `json:"limit"`

	// MaxQueue is the number of calls that may wait for a slot when all
	// Limit slots are taken. 0 means none: a call that finds the bulkhead
	// full is rejected at once. [Unbounded] lets any number wait. Any other
	// negative value is invalid.
	MaxQueue int `json:"max_queue"`

	// MaxWait is how long one waiting call may wait for a slot before it is
	// rejected with reason "wait_timeout". 0 means it waits until its
	// context is done. Negative values are invalid.
	MaxWait time.Duration `json:"max_wait"`

	// Reserve keeps slots for calls of a priority (policy.WithPriority) and
	// above: with Reserve[policy.PriorityCritical] = 10, only critical calls
	// take the last 10 free slots. Only PriorityDefault and PriorityCritical
	// may reserve, no count may be negative, and at least one slot must stay
	// open to every call. Nil reserves nothing.
	Reserve map[policy.Priority]int `json:"reserve"`

	// FairShare serves the waiters of each priority key by key
	// (policy.WithKey), in turn, first come first served within a key, so
	// that one key's many waiters cannot take every slot freed. Calls
	// without a key are one key. [Bulkhead.Update] cannot change it. It costs
	// nothing while nobody waits.
	FairShare bool `json:"fair_share"`

	// MaxPerKey is the number of slots one key may hold at once; 0 means
	// no cap. A call whose key holds them waits, or is rejected with
	// Reason "key_full" if it may not wait. It needs FairShare, and takes
	// a lock on every call to count the key's slots. Negative values are
	// invalid.
	MaxPerKey int `json:"max_per_key"`

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnReject, if not nil, is called once for every rejection, holding no
	// lock, on the rejected caller's goroutine, with its ctx and the error
	// Execute returns. It must not modify the error.
	OnReject func(ctx context.Context, err *policy.RejectedError) `json:"-"`
}

// MarshalJSON returns c's data fields as a JSON object.
func (c Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(c) }

// UnmarshalJSON reads the JSON object data into c. It refuses what [New]
// refuses, with an error naming the JSON field: "limit: must be >= 1, got
// 0". A key data leaves out leaves its field as it was; on error c is
// unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, Config.validate)
}

// validate reports the first invalid field of c.
func (c Config) validate() error {
	if c.Limit < 1 {
		return fielderr.New("bulkhead", "Limit", "must be >= 1, got %d", c.Limit)
	}
	if err := slots.CheckConfig("bulkhead", c.MaxQueue, c.MaxWait, c.Reserve, c.Limit); err != nil {
		return err
	}
	return slots.CheckKeys("bulkhead", c.keys())
}

// keys returns c's fair share settings.
func (c Config) keys() slots.Keys { return slots.Keys{Fair: c.FairShare, MaxPerKey: c.MaxPerKey} }
