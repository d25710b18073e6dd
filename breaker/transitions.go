package breaker

import (
	"context"

	"github.com/watertight/watertight/policy"
)

// queue records a change to state to, if it is one. b.mu must be held.
func (b *Breaker) queue(to State) {
	if to == b.last {
		return
	}
	b.pending = append(b.pending, transition{from: b.last, to: to})
	b.last = to
	b.queued.Store(true)
}

// errNotRun is the outcome with which an excluded call is reported to
// gobreaker (see verdict.err): one whose outcome says nothing about the
// dependency, one whose IsFailure panicked, and one the breaker admitted but
// that never ran, because a hook panicked in enter. It frees a half-open
// probe's place without counting as a failure of the dependency (a hook
// that always panics must not keep the breaker open forever).
var errNotRun = policy.NewSentinel("breaker: admitted call not run")

// flushAdmitted flushes the changes queued by an Allow that admitted the call
// with done. If a hook panics or calls runtime.Goexit, done is given
// errNotRun, from a deferred call that recovers nothing, so that the
// admitted call, which will never run, does not hold a half-open probe.
func (b *Breaker) flushAdmitted(ctx context.Context, done func(error)) {
	if done == nil {
		b.flush(ctx)
		return
	}
	ok := false
	defer func() {
		if !ok {
			done(errNotRun)
		}
	}()
	b.flush(ctx)
	ok = true
}

// flush reports the queued changes, in order, outside every lock, unless
// another goroutine is already doing so: that one then reports them too.
// This keeps the hooks in order and lets them call the Breaker (a hook's own
// call finds a flush under way and returns at once).
func (b *Breaker) flush(ctx context.Context) {
	b.mu.Lock()
	if b.draining || len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	b.draining = true
	b.mu.Unlock()

	finished := false
	defer func() {
		if !finished { // a hook panicked: the next flush reports the rest
			b.mu.Lock()
			b.draining = false
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.draining = false
			b.queued.Store(false)
			b.mu.Unlock()
			finished = true
			return
		}
		t := b.pending[0]
		n := copy(b.pending, b.pending[1:])
		b.pending = b.pending[:n]
		b.mu.Unlock()

		b.tel.transition(ctx, t.from, t.to)
		if b.onStateChange != nil {
			b.onStateChange(t.from, t.to)
		}
	}
}
