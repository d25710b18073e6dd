package retry

import "time"

// Schedule gives the waits between the attempts of one call. Next returns
// the wait before the next attempt, or ok = false to stop, which ends the
// call with Reason [ReasonStopped]. A negative wait means none, and every
// wait is capped at Config.MaxInterval. An error's RetryAfter takes
// precedence, and Next is not called for it.
//
// [Config.NewSchedule] makes one Schedule per call. It is used by that
// call alone, one Next at a time, so it needs no lock.
type Schedule interface {
	Next() (wait time.Duration, ok bool)
}

// ScheduleFunc is a [Schedule] that calls its function.
type ScheduleFunc func() (wait time.Duration, ok bool)

// Next calls f.
func (f ScheduleFunc) Next() (time.Duration, bool) { return f() }
