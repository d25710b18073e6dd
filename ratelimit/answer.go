package ratelimit

import (
	"math"
	"time"
)

// Answer holds what one reply of the dependency says about its quota.
// httppolicy.LimiterSignals reads one from each HTTP response's rate-limit
// headers; a client of another protocol can fill one in. The zero Answer
// asks for no hold and names no count.
type Answer struct {
	// Hold is how long every attempt should wait, from when Observe is
	// called: a Retry-After, or the refill of a bucket the answer says is
	// short. 0 or less asks for no hold, and so does more than a day. A
	// hold is capped at Config.MaxHold.
	Hold time.Duration

	// Counted reports whether the answer names Remaining.
	Counted bool
	// Remaining is how many requests are left in the dependency's requests
	// bucket, if Counted. Less than 0 counts as 0.
	Remaining int
	// Limit is the size of the requests bucket. 0 or less means the
	// answer names none.
	Limit int
	// FullAt is when the requests bucket will be full again (its reset).
	// The zero time means the answer names none.
	FullAt time.Time
}

// Observe feeds the hold from one answer of the dependency, and, after a
// hold, the gate (see the package documentation). It is safe for
// concurrent use.
func (l *Limiter) Observe(a Answer) {
	hold := a.Hold
	if hold > maxSignal {
		hold = 0
	}
	// Most answers ask for nothing, and nothing is gated: say so without
	// reading the clock.
	if hold <= 0 && l.active.Load() == 0 {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if hold > 0 {
		l.holdLocked(now, hold)
		// The answer that set the hold orders the answers after it too: a
		// slow one to an attempt sent before it, with a larger count,
		// must not let a burst through once the hold ends. Less a second,
		// as resets in whole seconds cannot order answers closer than
		// that.
		if !a.FullAt.IsZero() {
			if at := int64(a.FullAt.Sub(l.epoch) - time.Second); at <= int64(now.Sub(l.epoch)+l.maxHold) {
				l.fullAt = max(l.fullAt, at)
			}
		}
		return
	}
	if !l.gate {
		return
	}
	// While a hold is in force, an answer (to an attempt sent before the
	// hold) is stale: when the hold ends, one attempt goes first all the
	// same, and its answer says what is left.
	if l.end > int64(now.Sub(l.epoch)) {
		return
	}
	// After it, an answer that sets no hold tells the gate how many more
	// attempts the quota allows; one that says nothing opens it.
	if !a.Counted {
		l.budget = 0
		l.openLocked(now)
		return
	}
	l.countLocked(now, a)
}

// countLocked feeds the gate from an answer naming a count, after the
// hold.
func (l *Limiter) countLocked(now time.Time, a Answer) {
	n, limit := max(a.Remaining, 0), max(a.Limit, 0)
	// Answers come back out of order (each on its connection, each
	// observed on its own goroutine), and an older one, counting fewer
	// requests, would let through attempts that a newer one had already
	// ruled out. The moment the requests bucket will be full again orders
	// them: refilling leaves it where it is, and each request the server
	// counts moves it on. An answer that puts it before one already seen is
	// older: its count says nothing new.
	// A reset further than MaxHold away (a daily bucket's, say) orders
	// nothing: taken as the mark, it would rule out every answer after it
	// for that long.
	hasReset := !a.FullAt.IsZero()
	if hasReset {
		if at := int64(a.FullAt.Sub(l.epoch)); a.FullAt.Sub(now) <= l.maxHold {
			if at < l.fullAt {
				return
			}
			l.fullAt = at
		}
	}
	// The refill of one request sets the pace of the timed release: from
	// now, one more attempt goes every r/(L-n), or every reset without a
	// usable limit, at most MaxHold; without a reset, at the pace it had
	// (the hold's, to begin with).
	if hasReset {
		l.every = int64(max(min(refillOne(int64(n), int64(limit), a.FullAt.Sub(now)), l.maxHold), 1))
	}
	l.limit = limit
	l.next = int64(now.Sub(l.epoch)) + l.every
	// What the timed release has granted so far is what this answer
	// lowers, if it is not the last one out's.
	l.releaseLocked(now)
	// The count leaves out the attempts the gate let through that the
	// server had not seen yet: this one's own is in it.
	budget := max(n-max(l.out-1, 0), 0)
	if l.told && l.out > 1 {
		// With others out, this answer may be older than theirs (a reset
		// in whole seconds does not order them), its count larger by the
		// requests counted since, and those attempts may have ended,
		// leaving out: it can lower what the gate lets through, not
		// raise it. The answer of the last one out, or of the probe that
		// goes once none is, says what the refill has added.
		budget = min(budget, l.budget)
	}
	l.budget, l.told = budget, true
	l.openIfLeftLocked(now)
}

// refillOne returns how long a requests bucket with n left of limit, full
// again in r, takes to refill one request. The bucket refills
// continuously, at (limit-n)/r, so that is r/(limit-n); it is r without a
// usable limit (one not above n+1).
func refillOne(n, limit int64, r time.Duration) time.Duration {
	if limit <= n || limit-n <= 1 {
		return r
	}
	d := time.Duration(math.Ceil(float64(r) / float64(limit-n)))
	return min(max(d, 0), r)
}
