package ratelimit

import "time"

// Status is a Limiter's state as a status page shows it.
type Status struct {
	// HeldUntil is when the hold in force ends, or the zero Time.
	HeldUntil time.Time
	// Gated says a hold has ended and its gate is still closed: attempts
	// go a few at a time until an answer says how much quota is left.
	Gated bool
	// RequestsPerSecond and TokensPerMinute are the client-side rates in
	// force (0: none).
	RequestsPerSecond, TokensPerMinute float64
}

// Status returns the Limiter's state now. It takes no lock.
func (l *Limiter) Status() Status {
	c := l.Config()
	s := Status{RequestsPerSecond: c.RequestsPerSecond, TokensPerMinute: c.TokensPerMinute}
	// active is the hold's end (ns since epoch) while a hold or the gate
	// is in force, else 0.
	if a := l.active.Load(); a != 0 {
		if end := l.epoch.Add(time.Duration(a)); time.Now().Before(end) {
			s.HeldUntil = end
		} else {
			s.Gated = true
		}
	}
	return s
}
