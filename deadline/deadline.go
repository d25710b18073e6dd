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

// Kind is the watertight.policy.kind of a Deadline.
const Kind = "deadline"

// Deadline runs calls with a timeout. Create one with [New]. It is safe
// for concurrent use. The zero value imposes no timeout.
type Deadline struct {
	name      string
	timeout   time.Duration
	cause     error // the cause of the contexts it creates: its own, so that it knows its timer
	record    *telemetry.Timeout
	onTimeout func(ctx context.Context, timeout time.Duration)
}

// New returns a Deadline configured by cfg, or an error naming the first
// invalid field of cfg.
func New(cfg Config) (*Deadline, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	in := telemetry.NewInstruments(cfg.MeterProvider)
	return &Deadline{
		name:      cfg.Name,
		timeout:   cfg.Timeout,
		cause:     &ExceededError{Name: cfg.Name, Duration: cfg.Timeout},
		record:    telemetry.NewTimeout(in, Kind, cfg.Name),
		onTimeout: cfg.OnTimeout,
	}, nil
}

// Timeout returns Config.Timeout (0 for the zero Deadline).
func (d *Deadline) Timeout() time.Duration { return d.timeout }

// Execute runs fn with a context that is done after the timeout, and
// returns as the package's Outcomes table says. It panics if ctx or fn is
// nil.
func (d *Deadline) Execute(ctx context.Context, fn policy.Func) (err error) {
	if fn == nil {
		panic("deadline: nil fn")
	}
	inner, t := d.Start(ctx)
	// A panic or runtime.Goexit in fn releases the timer too.
	err = policy.ErrAborted
	defer func() { err = t.Stop(err) }()
	return fn(inner)
}

// Timer is one call's timeout, started by [Deadline.Start]. Its zero value
// has no timeout: Stop returns its argument. Stop makes a Timer zero, so a
// second Stop of the same Timer returns its argument and counts nothing.
// A copy is the same timer, so stop only one of them.
type Timer struct {
	d      *Deadline
	ctx    context.Context
	cancel context.CancelFunc
}

// Start starts one call's timeout. It returns the context the call must
// run with, done at now + Timeout, and its [Timer]. It returns ctx itself,
// and sets no timer, if ctx's deadline comes as soon, or if now + Timeout
// is past the year 2262. Call Timer.Stop when the call ends. Start panics
// if ctx is nil.
func (d *Deadline) Start(ctx context.Context) (context.Context, Timer) {
	if ctx == nil {
		panic("deadline: nil Context")
	}
	if d.timeout <= 0 {
		return ctx, Timer{}
	}
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

// Stop releases the timer and returns err as the package's Outcomes table
// says: wrapped in an [*ExceededError] if the timer fired while the call
// ran, else unchanged.
func (tp *Timer) Stop(err error) error {
	t := *tp
	if t.cancel == nil {
		return err
	}
	*tp = Timer{}
	// Read the cause before cancel: only a timer that fired while fn ran
	// makes its error a timeout.
	fired := err != nil && err != policy.ErrAborted && context.Cause(t.ctx) == t.d.cause &&
		!errors.Is(err, policy.ErrRejected) && !errors.Is(err, stage.ErrGaveUp)
	t.cancel()
	if !fired {
		return err
	}
	d := t.d
	d.record.Record(t.ctx)
	if d.onTimeout != nil {
		d.onTimeout(t.ctx, d.timeout)
	}
	return &ExceededError{Name: d.name, Duration: d.timeout, Err: err}
}
