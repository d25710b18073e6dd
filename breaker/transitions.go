package breaker

import "context"

// queue records a change to state to, if it is one. b.mu must be held.
func (b *Breaker) queue(to State) {
	if to == b.last {
		return
	}
	b.pending = append(b.pending, transition{from: b.last, to: to})
	b.last = to
	b.queued.Store(true)
}

// flushAdmitted flushes the changes queued by an Allow that admitted the
// call with done. If a hook panics, the call never runs: done is given
// errNotRun, so it does not hold a half-open probe's place.
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

// flush reports the queued changes in order, outside every lock, unless
// another goroutine is doing so: that one reports them too. So the hooks
// run in order and may call the Breaker.
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
