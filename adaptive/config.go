package adaptive

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
	"github.com/watertight/watertight/internal/slots"
	"github.com/watertight/watertight/policy"
)

// Unbounded, as Config.MaxQueue, lets any number of callers wait.
const Unbounded = -1

// Defaults of the Config fields whose zero value means "the default".
const (
	DefaultMinLimit      = 1
	DefaultMaxLimit      = 200
	DefaultInitialLimit  = 20
	DefaultTolerance     = 1.25
	DefaultProbeInterval = 30 * time.Second
)

// Config configures a [Limiter]. Its zero value is valid: each field says
// its default. [New] copies it.
//
// Config reads and writes JSON: {"max_limit": 100, "max_wait": "2s",
// "reserve": {"critical": 5}}. The keys are the json tags, durations are
// Go duration strings and priorities are named; zero fields are left out.
// MeterProvider and OnReject are not data: they are neither written nor
// read.
type Config struct {
	// Name names the limiter in errors and telemetry. Empty is allowed.
	Name string `json:"name"`

	// MinLimit and MaxLimit bound the limit. 0 means the default (1 and
	// 200). Otherwise MinLimit must be >= 1 and MaxLimit >= MinLimit.
	MinLimit int `json:"min_limit"`
	MaxLimit int `json:"max_limit"`

	// InitialLimit is the limit the first adjustment starts from. 0 means
	// 20, clamped to [MinLimit, MaxLimit]; otherwise it must lie there.
	InitialLimit int `json:"initial_limit"`

	// MaxQueue is the number of calls that may wait when the limit is
	// reached. 0 means none. [Unbounded] lets any number wait. Other
	// negative values are invalid.
	MaxQueue int `json:"max_queue"`

	// MaxWait is how long a call may wait before it is rejected. 0 means
	// until its context is done. Negative values are invalid.
	MaxWait time.Duration `json:"max_wait"`

	// Reserve keeps slots for calls of a priority (policy.WithPriority) and
	// above, as bulkhead.Config.Reserve does. The reserve applies to the
	// admission limit, a probe's lower cap included: while it is at most
	// the slots reserved above a priority, calls of that priority wait and
	// are rejected. Under overload, and during the probe that starts at
	// New, lower priorities go first. The limit learns from the calls of
	// every priority: a call reaches the limit when the calls in flight
	// reach its priority's share of it. A probe admits at most 3
	// calls, so calls below reserves of 3 or more never run in one: while
	// only they arrive, no probe measures and the limit does not move. Only
	// PriorityDefault and PriorityCritical may reserve, no count may be
	// negative, and MaxLimit must leave at least one slot open to every
	// call. Nil reserves nothing.
	Reserve map[policy.Priority]int `json:"reserve"`

	// FairShare serves the waiters of each priority key by key
	// (policy.WithKey), in turn, as bulkhead.Config.FairShare does. Calls
	// without a key are one key. [Limiter.Update] cannot change it.
	FairShare bool `json:"fair_share"`

	// MaxPerKey is the number of slots one key may hold at once; 0 means
	// no cap. A call whose key holds them waits, or is rejected with
	// Reason "key_full" if it may not wait. It needs FairShare, and takes
	// a lock on every call. Negative values are invalid.
	MaxPerKey int `json:"max_per_key"`

	// Tolerance is the ratio to the no-load latency at which the limit
	// settles. 0 means 1.25; otherwise it must be finite and >= 1.
	Tolerance float64 `json:"tolerance"`

	// ProbeInterval is how long after one probe the next is due. It runs at
	// the next window whose calls reach the limit. 0 means 30 s; negative
	// values are invalid. Probes are at least 20 windows apart.
	ProbeInterval time.Duration `json:"probe_interval"`

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
// refuses, with an error naming the JSON field: "tolerance: must be
// finite and >= 1 (0 means 1.25), got 0.5". A key data leaves out leaves
// its field as it was; on error c is unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, func(c Config) error {
		_, err := c.resolve()
		return err
	})
}

// keys returns c's fair share settings.
func (c Config) keys() slots.Keys { return slots.Keys{Fair: c.FairShare, MaxPerKey: c.MaxPerKey} }

// resolve returns c with its defaults applied, or an error naming its
// first invalid field.
func (c Config) resolve() (Config, error) {
	r := c
	r.MinLimit = cmp.Or(r.MinLimit, DefaultMinLimit)
	if r.MinLimit < 1 {
		return r, fielderr.New("adaptive", "MinLimit", "must be >= 1 (0 means %d), got %d", DefaultMinLimit, c.MinLimit)
	}
	got := fmt.Sprint(c.MaxLimit)
	if r.MaxLimit == 0 {
		r.MaxLimit, got = DefaultMaxLimit, fmt.Sprintf("0 (which means %d)", DefaultMaxLimit)
	}
	if r.MaxLimit < r.MinLimit {
		return r, fielderr.New("adaptive", "MaxLimit", "must be >= MinLimit (%d), got %s", r.MinLimit, got)
	}
	if r.InitialLimit == 0 {
		r.InitialLimit = min(max(DefaultInitialLimit, r.MinLimit), r.MaxLimit)
	}
	if r.InitialLimit < r.MinLimit || r.InitialLimit > r.MaxLimit {
		return r, fielderr.New("adaptive", "InitialLimit", "must be in [MinLimit, MaxLimit] ([%d, %d]), got %d", r.MinLimit, r.MaxLimit, c.InitialLimit)
	}
	if err := slots.CheckConfig("adaptive", c.MaxQueue, c.MaxWait, c.Reserve, r.MaxLimit); err != nil {
		return r, err
	}
	if err := slots.CheckKeys("adaptive", c.keys()); err != nil {
		return r, err
	}
	r.Tolerance = cmp.Or(r.Tolerance, DefaultTolerance)
	if math.IsNaN(r.Tolerance) || math.IsInf(r.Tolerance, 0) || r.Tolerance < 1 {
		return r, fielderr.New("adaptive", "Tolerance", "must be finite and >= 1 (0 means %v), got %v", DefaultTolerance, c.Tolerance)
	}
	r.ProbeInterval = cmp.Or(r.ProbeInterval, DefaultProbeInterval)
	if r.ProbeInterval < 0 {
		return r, fielderr.New("adaptive", "ProbeInterval", "must be >= 0 (0 means %v), got %v", DefaultProbeInterval, c.ProbeInterval)
	}
	return r, nil
}
