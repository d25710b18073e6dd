package deadline

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// Kind is the watertight.policy.kind of every Deadline (on its
// watertight.timeouts counter and timeout events).
const Kind = "deadline"

var _ stage.Stage = (*twoPhase)(nil)

// Deadline runs calls with a timeout; see the package documentation for the
// outcomes. Create one with [New]. It is safe for concurrent use by
// multiple goroutines and holds no lock.
//
// The zero value imposes no timeout: it runs fn with the caller's context
// and returns fn's error unchanged.
type Deadline struct {
	name      string
	timeout   time.Duration
	cause     error
	record    *telemetry.Timeout
	onTimeout func(ctx context.Context, timeout time.Duration)
}

// New returns a Deadline configured by cfg, or an error naming the first
// invalid field of cfg. It never panics.
func New(cfg Config) (*Deadline, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	return &Deadline{
		name:      cfg.Name,
		timeout:   cfg.Timeout,
		cause:     newCause(cfg.Name, cfg.Timeout),
		record:    telemetry.NewTimeout(in, Kind, cfg.Name),
		onTimeout: cfg.OnTimeout,
	}, nil
}

// Timeout returns Config.Timeout (0 for the zero Deadline).
func (d *Deadline) Timeout() time.Duration { return d.timeout }

// Execute runs fn with a context that is done after the timeout, and
// returns when fn returns: fn's error, or an [*ExceededError] wrapping it
// if the Deadline's own timeout fired and fn failed with an error that is
// not a rejection (policy.ErrRejected), which is returned unchanged. A panic in fn goes on
// up the stack once the timer has been released. Execute panics if ctx or
// fn is nil.
func (d *Deadline) Execute(ctx context.Context, fn policy.Func) (err error) {
	// The two phases compose runs (enter, exit), as stage.Run would run
	// them, with the no-timer case short-cut.
	if ctx == nil {
		panic("deadline: nil Context")
	}
	if fn == nil {
		panic("deadline: nil fn")
	}
	inner, token, _ := d.enter(ctx)
	if token == nil {
		// No timer: exit would return err unchanged, and there is nothing
		// to release if fn panics.
		return fn(inner)
	}
	// finished stays false if fn panics or calls runtime.Goexit; the timer
	// is then released while the panic unwinds, and the panic is not
	// recovered: it belongs to the caller.
	finished := false
	defer func() {
		if !finished {
			d.exit(inner, token, stage.ErrAborted)
		}
	}()
	err = fn(inner)
	finished = true
	return d.exit(inner, token, err)
}

// enter starts one call, as internal/stage describes, and never fails. If
// the caller's deadline is as soon as now + Timeout or sooner, or now +
// Timeout is past what time can represent in int64 nanoseconds (the year
// 2262), it returns ctx itself and a nil token: no timer is set. Otherwise
// it returns a context that is done at now + Timeout, and its CancelFunc as
// the token. enter panics if ctx is nil.
func (d *Deadline) enter(ctx context.Context) (context.Context, stage.Token, error) {
	if ctx == nil {
		panic("deadline: nil Context")
	}
	if d.timeout <= 0 {
		return ctx, nil, nil
	}
	// One reading of the clock serves both the comparison with the caller's
	// deadline and the deadline set, which is what WithTimeoutCause would
	// compute from its own reading.
	now := time.Now()
	if u := now.UnixNano(); u > 0 && int64(d.timeout) > math.MaxInt64-u {
		return ctx, nil, nil
	}
	at := now.Add(d.timeout)
	if parent, ok := ctx.Deadline(); ok && !parent.After(at) {
		return ctx, nil, nil
	}
	inner, cancel := context.WithDeadlineCause(ctx, at, d.cause)
	return inner, cancel, nil
}

// exit ends a call started by enter, as internal/stage
// describes: it releases the timer and returns err, or an [*ExceededError]
// wrapping err if err is not nil, not a rejection, and the timer set by enter fired (the
// cause of ctx is the Deadline's own, so a cancellation or deadline of the
// caller's is returned unchanged). Given [stage.ErrAborted], it releases
// the timer and returns it.
func (d *Deadline) exit(ctx context.Context, token stage.Token, err error) error {
	cancel, ok := token.(context.CancelFunc)
	if !ok {
		return err
	}
	if err == nil || err == stage.ErrAborted || errors.Is(err, policy.ErrRejected) {
		// Nothing to classify: a rejection (a policy inside fn refused
		// the call) keeps its own row of the outcome table, and the
		// success path skips the cause lookup (a walk up ctx and a lock).
		cancel()
		return err
	}
	// Read the cause before cancel: once fn has returned, only a timer
	// that fired while it ran should make its error a timeout.
	fired := context.Cause(ctx) == d.cause
	cancel()
	if !fired {
		return err
	}
	return d.exceeded(ctx, err)
}
