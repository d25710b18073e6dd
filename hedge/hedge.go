package hedge

import (
	"context"
	"errors"
	"time"

	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// ErrLost is the cause (see [context.Cause]) with which [Do] cancels every
// attempt whose value it does not return, whatever ended the call: another
// attempt won, the caller's context ended, or a Deadline's timer fired
// (the cause then also matches the Deadline's). A policy that counts
// outcomes, such as a breaker, should exclude an attempt with this cause.
// It matches context.Canceled. The winner's context is canceled too, once
// Do returns, with the cause context.Canceled.
var ErrLost error = lostError{}

type lostError struct{}

func (lostError) Error() string        { return "hedge: lost: the call ended with another attempt" }
func (lostError) Is(target error) bool { return target == context.Canceled }

// stopped is the cause with which a call cancels its attempts when a
// Deadline's timer ends it: it matches ErrLost, as no attempt wins after
// it, and wraps the Deadline's cause, so that the policies below read it
// as the Deadline's (policy.TimedOut).
type stopped struct{ cause error }

func (e stopped) Error() string      { return ErrLost.Error() + ": " + e.cause.Error() }
func (e stopped) Unwrap() error      { return e.cause }
func (stopped) Is(target error) bool { return target == ErrLost || target == context.Canceled }

// errExited ends a call one of whose attempts called runtime.Goexit (or
// panicked: the program then crashes as the panic goes on).
var errExited = errors.New("hedge: an attempt panicked or called runtime.Goexit")

// Hedge decides when a call's attempts start: after a fixed or learned
// delay, or at once after a failure. Build one with [New] and share it;
// the zero Hedge is not usable. A Hedge is safe for concurrent use.
type Hedge struct {
	s   Config // resolved
	rec recorder
	est *delayEstimator // nil: fixed delay
}

// New returns a Hedge configured by cfg, or an error naming the first
// invalid field of cfg.
func New(cfg Config) (*Hedge, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	h := &Hedge{s: s, rec: newRecorder(s.MeterProvider, s.Name)}
	if s.Quantile != 0 {
		h.est = newDelayEstimator(s.Quantile, s.Delay, window)
	}
	return h, nil
}

// delay returns the delay in force: the fixed Delay, or the one learned.
// A negative value means no hedge starts on delay yet.
func (h *Hedge) delay() time.Duration {
	if h.est == nil {
		return h.s.Delay
	}
	return h.est.delay()
}

// Attempt returns the 1-based number of the hedged attempt ctx belongs
// to, or 0. It panics if ctx is nil.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		panic("hedge: nil Context")
	}
	return stage.Hedge(ctx)
}

// Do runs fn under p, hedging it, and returns the value of the first
// attempt that succeeds, or the error the package documentation's rules
// give. Each attempt is a whole run of p (policy.Do), so a call may hold
// 1 + MaxHedges bulkhead slots. A nil p runs fn directly.
//
// Each attempt runs on a goroutine of its own, with ctx's values and
// deadline; its context ends when Do cancels it, and answers [Attempt]
// with its number. Do returns as soon as it has the call's outcome,
// without waiting for the attempts it canceled.
//
// Every value Do does not return is dropped: if it holds something to
// free, such as a response body, fn must free it once
// errors.Is(context.Cause(ctx), ErrLost), which the returned value's
// context never matches. Do panics if ctx, h or fn is nil.
func Do[T any](ctx context.Context, h *Hedge, p policy.Policy, fn func(context.Context) (T, error)) (T, error) {
	switch {
	case ctx == nil:
		panic("hedge: nil Context")
	case h == nil:
		panic("hedge: nil Hedge")
	case fn == nil:
		panic("hedge: nil fn")
	}
	// Attempt n writes only vals[n-1], before it reports its success.
	vals := make([]T, 1+h.s.MaxHedges)
	n, err := h.run(ctx, func(ctx context.Context) error {
		var v T
		var err error
		if p == nil {
			v, err = fn(ctx)
		} else {
			v, err = policy.Do(ctx, p, fn)
		}
		if err == nil {
			vals[Attempt(ctx)-1] = v
		}
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return vals[n-1], nil
}
