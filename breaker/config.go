package breaker

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/metric"

	"github.com/watertight/watertight/policy"
)

// Defaults applied by [New] to the zero values of [Config].
const (
	// DefaultConsecutiveFailures is the consecutive rule when no rule is set.
	DefaultConsecutiveFailures uint32 = 5
	// DefaultMinRequests is MinRequests when FailureRatio is set.
	DefaultMinRequests uint32 = 10
	// DefaultWindow is Window when FailureRatio is set.
	DefaultWindow = 60 * time.Second
	// DefaultOpenTimeout is OpenTimeout's default.
	DefaultOpenTimeout = 30 * time.Second
	// DefaultHalfOpenRequests is HalfOpenRequests' default.
	DefaultHalfOpenRequests uint32 = 1
)

// Config configures a [Breaker]. Its zero value is valid: the breaker opens
// on the 5th consecutive failure, stays open 30 s, then lets one probe
// through. A Config is read once by [New]; changing it afterwards has no
// effect.
//
// A breaker has two trip rules, each off at its zero value; either one trips
// it when both are set. With neither set, the consecutive rule is on with
// [DefaultConsecutiveFailures].
type Config struct {
	// Name is the breaker's name: the watertight.policy.name attribute and
	// RejectedError.Name. The zero value is the empty name.
	Name string

	// ConsecutiveFailures trips the breaker on the Nth failure in a row
	// (N = ConsecutiveFailures; 1 trips on the first failure). Successes
	// reset the run; excluded outcomes neither extend nor reset it. 0 turns
	// the rule off, unless FailureRatio is 0 too: then it is 5.
	ConsecutiveFailures uint32

	// FailureRatio trips the breaker when, in the last Window,
	// failures / (successes + failures) >= FailureRatio and there were at
	// least MinRequests successes and failures. Excluded outcomes count in
	// neither. It must be in [0, 1]; 0 turns the rule off.
	FailureRatio float64

	// MinRequests is the number of successes and failures the last Window
	// must hold before the ratio rule can trip. 0 means 10. It is ignored
	// when FailureRatio is 0.
	MinRequests uint32

	// Window is the length of the rolling window in which outcomes are
	// counted while closed. It is kept as 10 buckets of Window/10 (at least
	// 1 ns; Window is rounded up to a multiple of it), timed from the
	// breaker's last change of state: an outcome is forgotten between
	// Window - Window/10 and Window after it was recorded. It must be >= 0.
	// 0 means 60 s when FailureRatio is set, and no window when it is not:
	// outcomes are then never forgotten while closed, and only a success
	// ends a run of failures. A Window set with FailureRatio 0 applies to
	// the consecutive rule: a run of failures older than Window is
	// forgotten.
	Window time.Duration

	// OpenTimeout is how long the breaker stays open before it becomes
	// half-open: exactly OpenTimeout after it opened, [Breaker.State]
	// reports HalfOpen and the next call is a probe. It must be >= 0; 0
	// means 30 s.
	OpenTimeout time.Duration

	// HalfOpenRequests is the number of probes let through while half-open,
	// and the number of successful probes that close the breaker; one failed
	// probe opens it again. A probe whose outcome is excluded frees its place
	// for another. 0 means 1.
	HalfOpenRequests uint32

	// IsFailure reports whether fn's error err (never nil) is a failure of
	// the dependency; otherwise it counts as a success. Nil means
	// [DefaultIsFailure], and then a throttled error (policy.ErrThrottled)
	// is excluded rather than a success. Some outcomes are fixed, and
	// IsFailure is not asked about them. A rejection and context.Canceled
	// are always excluded. So is any error once the breaker's ctx has
	// ended, unless a Deadline's timer ended it. A panic or runtime.Goexit
	// in fn is always a failure. IsFailure is called on the caller's
	// goroutine, outside every lock, and may call the Breaker. If it panics
	// or calls runtime.Goexit, the call is not counted (a half-open probe's
	// place is freed) and the panic or Goexit goes on.
	IsFailure func(err error) bool

	// MeterProvider provides the breaker's instruments. Nil means the global
	// MeterProvider.
	MeterProvider metric.MeterProvider

	// OnReject, if not nil, is called after every rejection, with the
	// caller's ctx and the prepared rejection (which must not be modified),
	// outside every lock.
	OnReject func(ctx context.Context, err *policy.RejectedError)

	// OnStateChange, if not nil, is called after every state change, outside
	// every lock, one call at a time and in the order of the changes. It may
	// call the Breaker (State, ForceOpen, Reset, even Execute). It usually
	// runs on the goroutine whose call caused the change, before that call
	// returns; when another goroutine is already delivering changes, that
	// goroutine delivers this one too. If it panics, the panic goes up
	// through the call delivering the change, and later changes are
	// delivered as usual.
	OnStateChange func(from, to State)
}

// resolved is a Config with its defaults applied.
type resolved struct {
	consecutive uint32
	ratio       float64
	minRequests uint32
	window      time.Duration
	openTimeout time.Duration
	halfOpen    uint32
	isFailure   func(error) bool
	// throttled is set when IsFailure is the default: a throttled error
	// (policy.ErrThrottled, a 429) is then excluded, neither a success nor
	// a failure.
	throttled bool
}

// resolve validates c and applies its defaults.
func (c *Config) resolve() (resolved, error) {
	if math.IsNaN(c.FailureRatio) || c.FailureRatio < 0 || c.FailureRatio > 1 {
		return resolved{}, fmt.Errorf("breaker: Config.FailureRatio must be in [0, 1] (0 turns the rule off), got %v", c.FailureRatio)
	}
	if c.Window < 0 {
		return resolved{}, fmt.Errorf("breaker: Config.Window must be >= 0, got %v", c.Window)
	}
	if c.OpenTimeout < 0 {
		return resolved{}, fmt.Errorf("breaker: Config.OpenTimeout must be >= 0, got %v", c.OpenTimeout)
	}
	r := resolved{
		consecutive: c.ConsecutiveFailures,
		ratio:       c.FailureRatio,
		window:      c.Window,
		openTimeout: c.OpenTimeout,
		halfOpen:    c.HalfOpenRequests,
		isFailure:   c.IsFailure,
	}
	if r.consecutive == 0 && r.ratio == 0 {
		r.consecutive = DefaultConsecutiveFailures
	}
	if r.ratio > 0 {
		r.minRequests = c.MinRequests
		if r.minRequests == 0 {
			r.minRequests = DefaultMinRequests
		}
		if r.window == 0 {
			r.window = DefaultWindow
		}
	}
	if r.openTimeout == 0 {
		r.openTimeout = DefaultOpenTimeout
	}
	if r.halfOpen == 0 {
		r.halfOpen = DefaultHalfOpenRequests
	}
	if r.isFailure == nil {
		r.isFailure = DefaultIsFailure
		r.throttled = true
	}
	return r, nil
}

// readyToTrip is gobreaker's ReadyToTrip: called under its lock after each
// failure while closed.
func (r *resolved) readyToTrip(c gobreaker.Counts) bool {
	if r.consecutive > 0 && c.ConsecutiveFailures >= r.consecutive {
		return true
	}
	if r.ratio > 0 {
		n := uint64(c.TotalSuccesses) + uint64(c.TotalFailures)
		// Division, not ratio*n: f/n is rounded to the double nearest the
		// exact quotient, so 3/10 >= 0.3 holds as written.
		return n >= uint64(r.minRequests) && float64(c.TotalFailures)/float64(n) >= r.ratio
	}
	return false
}

// maxWindow caps the rolling window handed to gobreaker: see settings.
const maxWindow = 100 * 365 * 24 * time.Hour

// settings returns the gobreaker settings of r, without OnStateChange.
func (r *resolved) settings(name string) gobreaker.Settings {
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: r.halfOpen,
		ReadyToTrip: r.readyToTrip,
		// The Breaker judges each call itself (outcome.go) and reports
		// the verdict: these only read it back.
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return err == errNotRun },
		// Each open period is a machine of its own, which the Breaker
		// holds open for as long as the period lasts (breaker.go):
		// gobreaker turns it half-open as soon as it may, strictly after
		// 1 ns, and is not asked before the period ends. (0 would mean
		// 60 s to it.)
		Timeout: 1,
	}
	if r.window > 0 {
		// gobreaker rounds Interval up to a multiple of BucketPeriod with
		// Interval+BucketPeriod-1, which overflows near math.MaxInt64 and
		// leaves it no buckets (every call would panic). A window of a
		// century forgets nothing a longer one would remember.
		w := min(r.window, maxWindow)
		st.Interval = w
		st.BucketPeriod = max(w/10, 1)
	}
	return st
}
