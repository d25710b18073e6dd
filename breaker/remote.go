package breaker

import (
	"context"
	"sync/atomic"
	"time"
)

// A hold is an open period, and the half-open period after it, that the
// Breaker runs itself rather than asking gobreaker: [Breaker.OpenUntil]
// starts one (a breaker shared by replicas applies an open decided
// elsewhere), and so does the breaker's own trip once a probe gate is set
// ([Breaker.GateProbes]), so that every half-open period asks the gate.
// While a hold is on, the gobreaker machine underneath is left alone (it
// is replaced by a fresh one when the hold ends) and its changes are not
// reported.
type hold struct {
	on atomic.Bool // a hold is in force; written under b.mu

	// The rest is guarded by b.mu.
	until     int64                      // end of the open period, Unix ns by time.Now
	halfOpen  bool                       // the half-open period has begun (and was reported)
	probes    uint32                     // probes admitted and not yet reported
	successes uint32                     // successful probes in this half-open period
	gen       uint64                     // bumped by every change of period: stale probes are ignored
	gate      func(context.Context) bool // GateProbes' gate, or nil
}

// heldProbe is the token of a probe admitted during a hold's half-open
// period.
type heldProbe struct{ gen uint64 }

// OpenUntil opens the breaker until t, on this process's clock: every call
// is rejected with reason "open" until then. From t the breaker is
// half-open, as after its own OpenTimeout. It lets
// [Config.HalfOpenRequests] probes through, asking the gate first if
// [Breaker.GateProbes] set one. It closes with fresh counts once that many
// have succeeded, and opens again for OpenTimeout on a failed probe. A t
// already past starts the half-open period at once. A later OpenUntil
// replaces an earlier one, and the outcomes of probes in flight are then
// ignored. [Breaker.Reset] ends it, and [Breaker.ForceOpen] takes
// precedence over it until Reset. Changes are reported (telemetry,
// OnStateChange) as usual, from the calling goroutine. It is safe for
// concurrent use. A breaker shared by replicas uses it to apply an open
// decided elsewhere.
func (b *Breaker) OpenUntil(t time.Time) {
	b.mu.Lock()
	b.startHold(t.UnixNano())
	b.mu.Unlock()
	b.flush(context.Background())
}

// GateProbes sets gate, which a half-open breaker asks before it admits
// each probe, on the caller's goroutine and outside every lock. If gate
// returns false, the call is rejected with reason "half_open_full" and
// takes no probe's place. With a gate set, the breaker's own trips open it
// as [Breaker.OpenUntil] does (for OpenTimeout), so that every half-open
// period asks the gate; a trip already in force is not affected. A nil
// gate removes it. gate must be quick and safe for concurrent use; it may
// call the Breaker's State and Counts. GateProbes is safe for concurrent
// use. A breaker shared by replicas sets a gate so that only the replica
// holding a probe lease probes.
func (b *Breaker) GateProbes(gate func(ctx context.Context) bool) {
	b.mu.Lock()
	b.hold.gate = gate
	b.mu.Unlock()
}

// holdFor is how long a trip's hold stays open: OpenTimeout.
func (b *Breaker) holdFor() time.Duration {
	return b.settings.Timeout + 1 // settings.Timeout is OpenTimeout - 1
}

// startHold opens a hold until the Unix time until (ns). b.mu must be held.
func (b *Breaker) startHold(until int64) {
	h := &b.hold
	h.on.Store(true)
	h.until = until
	h.probes, h.successes = 0, 0
	h.gen++
	b.setOpenFast(false) // the hold answers from now on
	if time.Now().UnixNano() < until {
		h.halfOpen = false
		b.queue(Open)
		return
	}
	h.halfOpen = true
	b.queue(HalfOpen)
}

// holdTrip is called from the machine's OnStateChange, under b.mu, when it
// opens: with a gate set, the trip becomes a hold. It reports whether it
// did.
func (b *Breaker) holdTrip(to State) bool {
	if to != Open || b.hold.gate == nil {
		return false
	}
	b.startHold(time.Now().Add(b.holdFor()).UnixNano())
	return true
}

// endHold ends a hold, if one is on. b.mu must be held; the caller swaps
// in a fresh machine and queues the change.
func (b *Breaker) endHold() {
	h := &b.hold
	if h.on.Load() {
		h.on.Store(false)
		h.gen++
		h.probes, h.successes, h.halfOpen = 0, 0, false
	}
}

// heldState returns the state of a hold, reporting the start of its
// half-open period if the time has come. It returns false if no hold is
// on.
func (b *Breaker) heldState() (State, bool) {
	if !b.hold.on.Load() {
		return Closed, false // no hold: State takes no lock for it
	}
	b.mu.Lock()
	if !b.hold.on.Load() {
		b.mu.Unlock()
		return Closed, false
	}
	s := b.heldStateLocked()
	b.mu.Unlock()
	b.flush(context.Background())
	return s, true
}

// heldStateLocked is heldState with b.mu held and a hold on.
func (b *Breaker) heldStateLocked() State {
	h := &b.hold
	if !h.halfOpen {
		if time.Now().UnixNano() < h.until {
			return Open
		}
		h.halfOpen = true
		b.queue(HalfOpen)
	}
	return HalfOpen
}

// allowHeld admits or rejects a call while a hold is on.
func (b *Breaker) allowHeld(ctx context.Context) (Permit, error) {
	b.mu.Lock()
	if !b.hold.on.Load() { // ended meanwhile: ask again
		b.mu.Unlock()
		return b.Allow(ctx)
	}
	s := b.heldStateLocked()
	full := b.hold.probes >= b.settings.MaxRequests
	gate, gen := b.hold.gate, b.hold.gen
	b.mu.Unlock()
	if b.queued.Load() {
		b.flush(ctx)
	}
	switch {
	case s == Open:
		return Permit{}, b.reject(ctx, b.rejOpen)
	case full:
		return Permit{}, b.reject(ctx, b.rejFull)
	}
	if gate != nil && !gate(ctx) {
		return Permit{}, b.reject(ctx, b.rejFull)
	}
	b.mu.Lock()
	h := &b.hold
	if !h.on.Load() || h.gen != gen || h.probes >= b.settings.MaxRequests {
		on := h.on.Load()
		b.mu.Unlock()
		if !on {
			return b.Allow(ctx)
		}
		return Permit{}, b.reject(ctx, b.rejFull)
	}
	h.probes++
	b.mu.Unlock()
	return Permit{b: b, ctx: ctx, probe: &heldProbe{gen: gen}}, nil
}

// settleProbe applies the verdict of a probe admitted by enterHeld: a
// failure opens the hold again for OpenTimeout, HalfOpenRequests successes
// end it (the breaker closes with a fresh machine), an excluded outcome
// frees its place. The outcome of a probe from an earlier period is
// ignored.
func (b *Breaker) settleProbe(ctx context.Context, p *heldProbe, v verdict) {
	var fresh *machine
	if v == succeeded {
		fresh = b.newMachine() // built outside the lock, as Reset does
	}
	b.mu.Lock()
	h := &b.hold
	if !h.on.Load() || h.gen != p.gen {
		b.mu.Unlock()
		return
	}
	h.probes--
	switch v {
	case failed:
		b.startHold(time.Now().Add(b.holdFor()).UnixNano())
	case succeeded:
		h.successes++
		if h.successes >= b.settings.MaxRequests {
			b.endHold()
			b.cb.Store(fresh)
			b.queue(Closed)
		}
	}
	b.mu.Unlock()
	b.flush(ctx)
}
