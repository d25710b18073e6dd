package ratelimit

import (
	"math"
	"time"
)

// Answer holds what one reply of the dependency says about its quota.
// httppolicy.LimiterSignals reads one from an HTTP response's headers. The
// zero Answer asks for no hold and names no count.
type Answer struct {
	// Hold is how long every attempt should wait from Observe: a
	// Retry-After, say. 0 or less, or more than a day, asks for no hold.
	Hold time.Duration

	Counted   bool      // the answer names Remaining
	Remaining int       // requests left in the requests bucket; less than 0 counts as 0
	Limit     int       // the size of the requests bucket; 0 or less names none
	FullAt    time.Time // when the requests bucket will be full again; zero names none
}

// Observe feeds the hold and the gate from one answer of the dependency.
// It is safe for concurrent use.
func (l *Limiter) Observe(a Answer) {
	hold := a.Hold
	if hold > maxSignal {
		hold = 0
	}
	if hold <= 0 && l.active.Load() == 0 {
		return
	}
	s := l.cur.Load()
	now, maxHold := time.Now(), s.maxHold
	if hold > 0 && s.shared != nil {
		// Deferred before the lock's release, so it runs after it.
		defer s.shared.Hold(min(hold, maxHold))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if hold > 0 {
		l.holdLocked(now, min(hold, maxHold))
		// The answer that set the hold orders the answers after it too, less
		// a second: resets in whole seconds order answers no closer.
		if at := int64(a.FullAt.Sub(l.epoch) - time.Second); !a.FullAt.IsZero() && at <= int64(now.Sub(l.epoch)+maxHold) {
			l.fullAt = max(l.fullAt, at)
		}
		return
	}
	// During the hold, an answer is to an attempt sent before it: stale.
	if !l.gate || l.end > int64(now.Sub(l.epoch)) {
		return
	}
	if !a.Counted {
		l.budget = 0
		l.openLocked(now)
		return
	}
	l.countLocked(now, a, maxHold)
}

// countLocked feeds the gate from an answer naming a count, with the
// MaxHold in force.
func (l *Limiter) countLocked(now time.Time, a Answer, maxHold time.Duration) {
	n, limit := max(a.Remaining, 0), max(a.Limit, 0)
	// Answers come back out of order. Each request the server counts moves
	// the reset on, so an answer whose reset is earlier is older. A reset
	// further than MaxHold away (a daily bucket's) orders nothing.
	// The timed release follows the refill of one request: r/(limit-n),
	// with the bucket full again in r, or r if limit is not above n+1.
	if r := a.FullAt.Sub(now); !a.FullAt.IsZero() {
		if at := int64(a.FullAt.Sub(l.epoch)); r <= maxHold {
			if at < l.fullAt {
				return
			}
			l.fullAt = at
		}
		if k := limit - n; k > 1 {
			r = min(max(time.Duration(math.Ceil(float64(r)/float64(k))), 0), r)
		}
		l.every = int64(max(min(r, maxHold), 1))
	}
	l.limit = limit
	l.next = int64(now.Sub(l.epoch)) + l.every
	l.releaseLocked(now)
	// The attempts out, this one's excepted, are not in the count.
	budget := max(n-max(l.out-1, 0), 0)
	if l.told && l.out > 1 {
		// With others out, this answer may be older than theirs.
		budget = min(budget, l.budget)
	}
	l.budget, l.told = budget, true
	l.openIfLeftLocked(now)
}
