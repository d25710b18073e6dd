package breaker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/watertight/watertight/policy"
)

// throttledErr is a 429 as httppolicy reports it: Is policy.ErrThrottled.
type throttledErr struct{}

func (throttledErr) Error() string        { return "429 Too Many Requests" }
func (throttledErr) Is(target error) bool { return target == policy.ErrThrottled }

// With the default classification a throttled answer (a 429) is excluded:
// a burst of them does not open the breaker, and one among 503s does not
// reset the run of consecutive failures. A user's IsFailure that counts
// everything counts it.
func TestThrottledIsExcluded(t *testing.T) {
	ctx := context.Background()
	fail := errors.New("503")
	run := func(b *Breaker, errs ...error) {
		for _, e := range errs {
			b.Execute(ctx, func(context.Context) error { return e })
		}
	}

	b := newBreaker(t, Config{ConsecutiveFailures: 3})
	run(b, throttledErr{}, throttledErr{}, throttledErr{}, throttledErr{}, throttledErr{})
	if c := b.Counts(); b.State() != Closed || c.TotalExclusions != 5 || c.TotalSuccesses != 0 || c.TotalFailures != 0 {
		t.Errorf("5 throttled answers: state %v, counts %+v; want closed, 5 exclusions", b.State(), c)
	}
	run(b, fail, fail, throttledErr{}, fail)
	if b.State() != Open {
		t.Errorf("503, 503, 429, 503 with ConsecutiveFailures 3: state %v; want open (the 429 must not reset the run)", b.State())
	}

	all := newBreaker(t, Config{ConsecutiveFailures: 3, IsFailure: func(err error) bool { return err != nil }})
	run(all, throttledErr{}, throttledErr{}, fmt.Errorf("wrapped: %w", throttledErr{}))
	if all.State() != Open {
		t.Errorf("3 throttled answers with an IsFailure that counts them: state %v; want open", all.State())
	}
}
