package retry

import (
	"context"
)

// Next gives the tests the loop compose drives, one step at a time.
func (r *Retry) Next(ctx context.Context, n int, err error, state *call) (bool, *call, error) {
	l := Loop{s: r.cur.Load(), ctx: ctx, n: n, state: state}
	again, final := l.next(err)
	return again, l.state, final
}

// reasons are the Reasons of an ExhaustedError.
var reasons = [...]string{ReasonMaxAttempts, ReasonStopped, ReasonDeadline, ReasonRetryAfter, ReasonRejected, ReasonBudget}

// ScheduleFunc gives the external tests scheduleFunc.
type ScheduleFunc = scheduleFunc

// MaxAttemptsOf returns r's resolved MaxAttempts.
func MaxAttemptsOf(r *Retry) int { return r.cur.Load().cfg.MaxAttempts }
