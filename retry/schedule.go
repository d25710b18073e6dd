package retry

import "time"

// Schedule gives the waits between the attempts of one call. A [Retry]
// calls Next after each failed attempt that is to be retried, unless the
// error sets the wait with a RetryAfter method. Next returns the wait
// before the next attempt, or ok = false to stop. Stopping ends the call
// with an [*ExhaustedError] with Reason [ReasonStopped]. A negative wait
// means none, and every wait is capped at Config.MaxInterval.
//
// A Schedule belongs to one call: [Config.NewSchedule] makes a fresh one
// for each call that needs it. That call alone uses it, one Next at a time,
// so it may keep state without a lock. It must not be shared between
// calls.
type Schedule interface {
	Next() (wait time.Duration, ok bool)
}

// ScheduleFunc is a [Schedule] made of a function, which its Next calls. A
// closure made inside Config.NewSchedule keeps per-call state. A function
// that keeps none costs no allocation. It is as safe for concurrent use as
// its function is.
type ScheduleFunc func() (wait time.Duration, ok bool)

// Next calls f and returns its results.
func (f ScheduleFunc) Next() (time.Duration, bool) { return f() }
