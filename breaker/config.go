package breaker

import (
	"cmp"
	"context"
	"math"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/internal/fielderr"
	"github.com/watertight/watertight/internal/jsonconf"
	"github.com/watertight/watertight/policy"
)

// Defaults applied by [New] to the zero values of [Config].
const (
	DefaultConsecutiveFailures uint32 = 5                // when no trip rule is set
	DefaultMinRequests         uint32 = 10               // when FailureRatio is set
	DefaultWindow                     = 60 * time.Second // when FailureRatio is set
	DefaultOpenTimeout                = 30 * time.Second
	DefaultHalfOpenRequests    uint32 = 1
)

// Config configures a [Breaker]. The zero value is valid: the breaker opens
// on the 5th consecutive failure, stays open 30 s, then lets one probe
// through. [New] and [Breaker.Update] copy it.
//
// Any trip rule trips the breaker. Each is off at its zero value. With
// neither failure rule set, ConsecutiveFailures is
// [DefaultConsecutiveFailures]; the slow rule is off unless set.
//
// Config reads and writes JSON: {"failure_ratio": 0.5, "window": "30s",
// "open_timeout": "10s"}. The keys are the json tags and durations are Go
// duration strings; zero fields are left out. IsFailure, MeterProvider,
// OnReject and OnStateChange are not data: they are neither written nor
// read.
type Config struct {
	// Name is the watertight.policy.name attribute and RejectedError.Name.
	Name string `json:"name"`

	// ConsecutiveFailures trips the breaker on the Nth failure in a row.
	// A success ends the run; an excluded outcome does not.
	ConsecutiveFailures uint32 `json:"consecutive_failures"`

	// FailureRatio trips the breaker when, in the last Window, there were
	// at least MinRequests successes and failures and
	// failures / (successes + failures) >= FailureRatio. It must be in
	// [0, 1].
	FailureRatio float64 `json:"failure_ratio"`

	// MinRequests is the least number of successes and failures for the
	// ratio rule. 0 means 10. It is ignored when FailureRatio is 0.
	MinRequests uint32 `json:"min_requests"`

	// SlowCallRatio trips the breaker when, in the last Window, there were
	// at least SlowCallMinCalls calls and slow / calls >= SlowCallRatio.
	// A call is slow once it has run for SlowCallDuration without an
	// answer (see [Permit.Begin]), even if it then succeeds: it is judged
	// the moment it passes that time, by a timer, not when it ends. The
	// calls are those that ended as a success or a failure, and those
	// judged slow that did not. While half-open, a probe that turns slow
	// opens the breaker again, as a failed probe does. It must be in
	// [0, 1]; 0 turns the rule off.
	SlowCallRatio float64 `json:"slow_call_ratio"`

	// SlowCallDuration is the time after which a call is slow. It must be
	// > 0 when SlowCallRatio is set, and 0 otherwise, and at most 9/10 of
	// the Window, so that a call is judged before it leaves the window.
	SlowCallDuration time.Duration `json:"slow_call_duration"`

	// SlowCallMinCalls is the least number of calls for the slow rule.
	// 0 means 10. It is ignored when SlowCallRatio is 0.
	SlowCallMinCalls uint32 `json:"slow_call_min_calls"`

	// Window is the rolling window in which outcomes and slow calls are
	// counted while closed: 10 buckets of Window/10 (rounded down to the
	// nanosecond; under 10 ns, buckets of 1 ns), each counting the calls
	// admitted in it. A call is forgotten between 9 and 10 buckets after it
	// was admitted, or its Window once buckets are 1 ns. It
	// must be >= 0. 0 means 60 s when FailureRatio or SlowCallRatio is set,
	// and otherwise no window: outcomes are never forgotten while closed.
	Window time.Duration `json:"window"`

	// OpenTimeout is how long the breaker stays open before it turns
	// half-open. It must be >= 0; 0 means 30 s.
	OpenTimeout time.Duration `json:"open_timeout"`

	// HalfOpenRequests is the number of probes let through while
	// half-open, and the number of successes that close the breaker.
	// 0 means 1.
	HalfOpenRequests uint32 `json:"half_open_requests"`

	// IsFailure reports whether fn's non-nil error err is a failure;
	// otherwise it is a success. It is asked only about the outcomes the
	// package's Outcomes table leaves to it. Nil means [DefaultIsFailure],
	// and a throttled error or a spent quota is then excluded. It runs on
	// the caller's goroutine, outside every lock, and may call the Breaker.
	IsFailure func(err error) bool `json:"-"`

	// MeterProvider provides the instruments. Nil means the global one.
	MeterProvider metric.MeterProvider `json:"-"`

	// OnReject, if not nil, is called after every rejection, outside every
	// lock. It must not modify err.
	OnReject func(ctx context.Context, err *policy.RejectedError) `json:"-"`

	// OnStateChange, if not nil, is called after every state change,
	// outside every lock. Calls are never concurrent and come in the order
	// of the changes. It may call the Breaker. If it panics, the panic goes
	// up through the call reporting the change.
	OnStateChange func(from, to State) `json:"-"`
}

// MarshalJSON returns c's data fields as a JSON object.
func (c Config) MarshalJSON() ([]byte, error) { return jsonconf.Marshal(c) }

// UnmarshalJSON reads the JSON object data into c. It refuses what [New]
// refuses, with an error naming the JSON field: "failure_ratio: must be
// in [0, 1] (0 turns the rule off), got 2". A key data leaves out leaves
// its field as it was; on error c is unchanged.
func (c *Config) UnmarshalJSON(data []byte) error {
	return jsonconf.Read(data, c, func(c Config) error {
		_, err := c.settings()
		return err
	})
}

// maxWindow caps the window: gobreaker's rounding overflows near
// math.MaxInt64.
const maxWindow = 100 * 365 * 24 * time.Hour

// check returns an error naming the first invalid field of c but the
// slow rule's bound by the Window, or nil.
func (c *Config) check() error {
	switch {
	case math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1:
		return fielderr.New("breaker", "FailureRatio", "must be in [0, 1] (0 turns the rule off), got %v", c.FailureRatio)
	case math.IsNaN(c.SlowCallRatio) || c.SlowCallRatio < 0 || c.SlowCallRatio > 1:
		return fielderr.New("breaker", "SlowCallRatio", "must be in [0, 1] (0 turns the rule off), got %v", c.SlowCallRatio)
	case c.SlowCallRatio > 0 && c.SlowCallDuration <= 0:
		return fielderr.New("breaker", "SlowCallDuration", "must be > 0 with SlowCallRatio set, got %v", c.SlowCallDuration)
	case c.SlowCallRatio == 0 && c.SlowCallDuration != 0:
		return fielderr.New("breaker", "SlowCallDuration", "is %v but SlowCallRatio is 0: set both, or neither", c.SlowCallDuration)
	case c.Window < 0:
		return fielderr.New("breaker", "Window", "must be >= 0, got %v", c.Window)
	case c.OpenTimeout < 0:
		return fielderr.New("breaker", "OpenTimeout", "must be >= 0, got %v", c.OpenTimeout)
	}
	return nil
}

// settings validates c and returns its gobreaker settings, without
// OnStateChange.
func (c *Config) settings() (gobreaker.Settings, error) {
	if err := c.check(); err != nil {
		return gobreaker.Settings{}, err
	}
	consecutive, ratio, window := c.ConsecutiveFailures, c.FailureRatio, c.Window
	minRequests := uint64(cmp.Or(c.MinRequests, DefaultMinRequests))
	if consecutive == 0 && ratio == 0 {
		consecutive = DefaultConsecutiveFailures
	}
	if (ratio > 0 || c.SlowCallRatio > 0) && window == 0 {
		window = DefaultWindow
	}
	st := gobreaker.Settings{
		Name:        c.Name,
		MaxRequests: cmp.Or(c.HalfOpenRequests, DefaultHalfOpenRequests),
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if consecutive > 0 && c.ConsecutiveFailures >= consecutive {
				return true
			}
			// Division, not ratio*n: 3/10 >= 0.3 holds as written.
			n := uint64(c.TotalSuccesses) + uint64(c.TotalFailures)
			return ratio > 0 && n >= minRequests && float64(c.TotalFailures)/float64(n) >= ratio
		},
		// The Breaker judges each call (outcome) and reports the verdict.
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return err == errNotRun },
		// The Breaker holds each open period itself: gobreaker may turn it
		// half-open at once (0 would mean 60 s).
		Timeout: 1,
	}
	if window > 0 {
		// gobreaker rounds Interval up to a multiple of BucketPeriod: 10
		// buckets of Window/10 rounded down, not 11; under 10 ns, 1 ns each.
		st.BucketPeriod, st.Interval = 1, window
		if window >= 10 {
			st.BucketPeriod = min(window, maxWindow) / 10
			st.Interval = 10 * st.BucketPeriod
		}
	}
	if d := c.SlowCallDuration; c.SlowCallRatio > 0 && d > st.Interval-st.BucketPeriod {
		return gobreaker.Settings{}, fielderr.New("breaker", "SlowCallDuration", "(%v) must be at most 9/10 of Window (%v)", d, window)
	}
	return st, nil
}
