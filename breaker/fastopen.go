package breaker

import "time"

// An open breaker rejects calls without asking gobreaker while openFast is
// set. Asking it costs a lock and a clock read; openFast costs an atomic
// load, and a timer per opening (the bench suite's RejectBreakerOpen
// measures the result).
//
// openFast is set when the current machine opens, and a timer clears it a
// margin (a tenth of OpenTimeout, at most maxFastOpenMargin) before the
// machine's OpenTimeout ends, so that it is cleared before gobreaker would
// turn half-open even if the timer runs late by up to the margin: the last
// stretch of the open period is answered by gobreaker itself, which alone
// decides when half-open begins. A timer late by more than the margin (a
// stalled machine) only delays half-open by its lateness. Reset and every
// change out of open clear it; a generation number keeps the timer of an
// earlier opening from clearing it for a later one.

// maxFastOpenMargin caps the margin: a tenth of OpenTimeout, at most this.
const maxFastOpenMargin = 100 * time.Millisecond

// fastOpenFor returns how long openFast stays set after the breaker opens
// for openTimeout, or 0 if the fast path is not worth a timer.
func fastOpenFor(openTimeout time.Duration) time.Duration {
	margin := min(openTimeout/10, maxFastOpenMargin)
	if margin <= 0 {
		return 0
	}
	return openTimeout - margin
}

// setOpenFast sets or clears openFast and, when setting it, arms the timer
// that clears it. b.mu must be held.
func (b *Breaker) setOpenFast(open bool) {
	b.openGen++
	if !open || b.fastFor == 0 {
		b.openFast.Store(false)
		return
	}
	gen := b.openGen
	b.openFast.Store(true)
	time.AfterFunc(b.fastFor, func() {
		b.mu.Lock()
		if b.openGen == gen { // not reset or reopened since
			b.openFast.Store(false)
		}
		b.mu.Unlock()
	})
}
