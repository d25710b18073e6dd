package retry

import "time"

// Schedule gives the waits between the attempts of one call. A [Retry]
// calls Next after each failed attempt that is to be retried and whose
// error does not set the wait itself (with a RetryAfter method): Next
// returns the wait before the next attempt, or ok = false to stop, which
// ends the call with an [*ExhaustedError] whose Reason is [ReasonStopped].
// A negative wait means none, and every wait is capped at
// Config.MaxInterval.
//
// A Schedule belongs to one call: [Config.NewSchedule] makes a fresh one for
// each call that needs it, and only that call uses it, one Next at a time
// from the caller's goroutine, so it may keep state (a count, the last wait)
// without a lock. It must not be shared between calls. A nil Schedule is not
// usable.
type Schedule interface {
	Next() (wait time.Duration, ok bool)
}

// ScheduleFunc is a [Schedule] made of a function, which its Next calls. A
// closure made inside Config.NewSchedule is a Schedule with per-call state;
// a function that keeps none, such as one returning 0, true for retries
// without waits, costs no allocation. The nil ScheduleFunc panics when used.
// It is as safe for concurrent use as its function is.
type ScheduleFunc func() (wait time.Duration, ok bool)

// Next calls f and returns its results.
func (f ScheduleFunc) Next() (time.Duration, bool) { return f() }
