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
// returns when fn returns. It returns fn's error, or an [*ExceededError]
// wrapping it if the Deadline's own timeout fired and fn failed. A
// rejection (policy.ErrRejected) is returned unchanged. A panic in fn goes
// on up the stack once the timer has been released. Execute panics if ctx
// or fn is nil.
func (d *Deadline) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("deadline: nil fn")
	}
	inner, t := d.Start(ctx)
	// finished stays false if fn panics or calls runtime.Goexit: the timer
	// is released while the panic goes on up.
	finished := false
	defer func() {
		if !finished {
			t.Stop(stage.ErrAborted)
		}
	}()
	err = fn(inner)
	finished = true
	return t.Stop(err)
}

// Timer is one call's timeout, started by [Deadline.Start]. Its zero value
// is a call with no timeout: Stop returns its argument. A Timer is a small
// value; copies share the timeout. Call Stop once, from any goroutine.
type Timer struct {
	d      *Deadline
	ctx    context.Context // the context Start returned
	cancel context.CancelFunc
}

// Start starts one call's timeout. It returns the context the call must
// run with, done at now + Timeout, and its [Timer]. It sets no timer, and
// returns ctx itself, if the caller's deadline comes as soon or sooner, or
// if now + Timeout is past the year 2262. Call Timer.Stop when the call
// ends, or its timer lives on until it fires. Start panics if ctx is nil.
func (d *Deadline) Start(ctx context.Context) (context.Context, Timer) {
	if ctx == nil {
		panic("deadline: nil Context")
	}
	if d.timeout <= 0 {
		return ctx, Timer{}
	}
	// One reading of the clock serves both the comparison with the caller's
	// deadline and the deadline set.
	now := time.Now()
	if u := now.UnixNano(); u > 0 && int64(d.timeout) > math.MaxInt64-u {
		return ctx, Timer{}
	}
	at := now.Add(d.timeout)
	if parent, ok := ctx.Deadline(); ok && !parent.After(at) {
		return ctx, Timer{}
	}
	inner, cancel := context.WithDeadlineCause(ctx, at, d.cause)
	return inner, Timer{d: d, ctx: inner, cancel: cancel}
}

// Stop releases the timer and returns err: unchanged, or as an
// [*ExceededError] wrapping it if the timer fired while the call ran and
// err is neither nil nor a rejection (policy.ErrRejected). A cancellation
// or deadline of the caller's is returned unchanged.
func (t Timer) Stop(err error) error {
	if t.cancel == nil {
		return err
	}
	if err == nil || err == stage.ErrAborted || errors.Is(err, policy.ErrRejected) {
		// A rejection keeps its own row of the outcome table; success
		// skips the cause lookup.
		t.cancel()
		return err
	}
	// Read the cause before cancel: only a timer that fired while fn ran
	// makes its error a timeout.
	fired := context.Cause(t.ctx) == t.d.cause
	t.cancel()
	if !fired {
		return err
	}
	return t.d.exceeded(t.ctx, err)
}
