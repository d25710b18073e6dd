package ratelimit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/watertight/watertight/internal/stage"
)

// Shared is a quota that a [Limiter] shares with other processes, such as
// redisstate.Quota: requests and tokens per interval across a fleet. Set
// it in [Config.Shared]. Its methods must be safe for concurrent use.
type Shared interface {
	// Take admits one attempt that declares cost tokens ([WithCost]),
	// waiting until by at the latest. It returns nil once the attempt may
	// run, a rejection matching [ErrLimited] and policy.ErrRejected if it
	// may not by then, or ctx's error. It should charge nothing for an
	// attempt it does not admit.
	Take(ctx context.Context, cost int, by time.Time) error
	// Settle ends an attempt Take admitted, which declared cost tokens
	// and used used (see "A shared quota" in the package doc for how the
	// Limiter counts used). It must not block.
	Settle(cost, used int)
	// Hold asks every process that shares the quota to hold its attempts
	// for d from now, as a Retry-After does. It must not block.
	Hold(d time.Duration)
}

// ticket is one attempt a Shared admitted, waiting for its settlement.
type ticket struct {
	shared Shared
	cost   int
	used   atomic.Int64 // reported by ReportUsage; -1: none
}

type usageKey struct{}

// share admits an attempt through the Limiter's own hold, gate and rates,
// then through s.shared, which may wait until the attempt's MaxWait or
// deadline counted from now.
func (l *Limiter) share(ctx context.Context, s *settings, active bool) (Permit, error) {
	by := waitBound(ctx, time.Now(), s.maxWait)
	p := Permit{l: l}
	if active || s.requests != nil || s.tokens != nil {
		var err error
		if p, err = l.reserve(ctx, s, active); err != nil {
			return p, err
		}
	}
	cost := Cost(ctx)
	if err := s.shared.Take(ctx, cost, by); err != nil {
		p.Done(err)
		if ctx.Err() != nil && stage.WaitRefused(ctx) {
			// A Deadline's timer ended the wait: fn never ran, as in sleep.
			return Permit{}, l.rated.Record(ctx)
		}
		return Permit{}, err
	}
	p.t = &ticket{shared: s.shared, cost: cost}
	p.t.used.Store(-1)
	return p, nil
}

// settle settles t with the attempt's outcome err.
func (t *ticket) settle(err error) {
	used := t.used.Load()
	switch {
	case used >= 0:
	case err == nil:
		used = int64(t.cost)
	default:
		used = 0
	}
	t.shared.Settle(t.cost, int(used))
}

// Begin returns ctx carrying p, so that [ReportUsage] in the attempt reaches
// p's shared quota. Without [Config.Shared] it returns ctx. It panics if
// ctx is nil.
func (p Permit) Begin(ctx context.Context) context.Context {
	if p.t == nil {
		return ctx
	}
	return context.WithValue(ctx, usageKey{}, p.t)
}

// ReportUsage reports the tokens the attempt run with ctx used, as the
// dependency counted them (a response's usage field), to the shared quota
// of the Limiter that admitted it ([Config.Shared]): the attempt is settled
// at tokens rather than at its declared cost. A later report replaces an
// earlier one. A negative tokens, or a ctx of no such attempt, is ignored.
// It is safe for concurrent use.
func ReportUsage(ctx context.Context, tokens int) {
	if t, ok := ctx.Value(usageKey{}).(*ticket); ok && tokens >= 0 {
		t.used.Store(int64(tokens))
	}
}

// WantsUsage reports whether [ReportUsage] with ctx is heard: whether ctx
// is an attempt's that a shared quota settles. A reader of responses can
// skip looking for usage when it is not.
func WantsUsage(ctx context.Context) bool {
	_, ok := ctx.Value(usageKey{}).(*ticket)
	return ok
}

// waitBound returns from + d, or just before ctx's deadline if that is
// sooner: a wait must end strictly before the deadline, as retry's must.
func waitBound(ctx context.Context, from time.Time, d time.Duration) time.Time {
	t := from.Add(d)
	if dl, ok := ctx.Deadline(); ok && !t.Before(dl) {
		return dl.Add(-1)
	}
	return t
}
