package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
)

// errOpenTest and rejOpen stand for an open breaker below the Retry.
var (
	errOpenTest = policy.NewSentinel("breaker: open")
	rejOpen     = policy.NewRejectedError("breaker", "llm", "open", errOpenTest)
)

// A rejection after an attempt that ran fn is not the call's outcome: the
// call ends exhausted with fn's error, the rejection in a field outside the
// chain, counted as an exhaustion.
func TestRejectionAfterAttemptRan(t *testing.T) {
	bare := policy.NewSentinel("shed: overloaded")
	tests := []struct {
		name      string
		rejection error
		failures  int // attempts that run fn and fail before the rejection
		wantRej   *policy.RejectedError
		wantMsg   string
	}{
		{"after attempt 1", rejOpen, 1, rejOpen,
			`retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker "llm" rejected the call: open): boom 1`},
		{"after attempt 2", rejOpen, 2, rejOpen,
			`retry "llm": gave up after 2 attempts: attempt 3 was rejected (breaker "llm" rejected the call: open): boom 2`},
		{"wrapped rejection", fmt.Errorf("pipeline: %w", rejOpen), 1, rejOpen,
			`retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker "llm" rejected the call: open): boom 1`},
		{"marked rejection", policy.Permanent(rejOpen), 1, rejOpen,
			`retry "llm": gave up after 1 attempt: attempt 2 was rejected (breaker "llm" rejected the call: open): boom 1`},
		// A rejection without a RejectedError is a rejection all the same.
		{"bare sentinel", bare, 1, nil,
			`retry "llm": gave up after 1 attempt: attempt 2 was rejected: boom 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reader := sdkmetric.NewManualReader()
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
				defer mp.Shutdown(context.Background())
				r := mustNew(t, Config{Name: "llm", MaxAttempts: 5, MeterProvider: mp})
				errs := make([]error, tt.failures)
				for i := range errs {
					errs[i] = fmt.Errorf("boom %d", i+1)
				}
				res := run(t.Context(), r, func(n int) error {
					if n <= tt.failures {
						return errs[n-1]
					}
					return tt.rejection
				})
				last := errs[tt.failures-1]
				if res.calls != tt.failures+1 {
					t.Fatalf("calls = %d, want %d", res.calls, tt.failures+1)
				}
				if errors.Is(res.err, policy.ErrRejected) || errors.Is(res.err, errOpenTest) || errors.Is(res.err, bare) {
					t.Errorf("err = %v matches a rejection: fn ran", res.err)
				}
				if !errors.Is(res.err, ErrExhausted) || !errors.Is(res.err, last) || errors.Unwrap(res.err) != last {
					t.Errorf("err = %v; want ErrExhausted, unwrapping to fn's last error %v", res.err, last)
				}
				var ee *ExhaustedError
				if !errors.As(res.err, &ee) || ee.Reason != ReasonRejected || ee.Attempts != tt.failures ||
					ee.Rejection != tt.wantRej || ee.Name != "llm" || ee.wait != 0 {
					t.Fatalf("ExhaustedError = %+v; want Reason rejected, Attempts %d, Rejection %v", ee, tt.failures, tt.wantRej)
				}
				if res.err.Error() != tt.wantMsg {
					t.Errorf("message = %q, want %q", res.err, tt.wantMsg)
				}
				if got := telemetry.ErrorType(res.err); got != telemetry.TypeExhausted {
					t.Errorf("ErrorType = %q, want %q", got, telemetry.TypeExhausted)
				}
				attrs := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("llm"))
				exhaustedAttrs := attribute.NewSet(telemetry.KeyKind.String("retry"), telemetry.KeyName.String("llm"), telemetry.KeyRetryReason.String(ReasonRejected))
				got := sums(t, reader)
				if v := got[telemetry.MetricExhausted][exhaustedAttrs]; v != 1 || len(got[telemetry.MetricExhausted]) != 1 {
					t.Errorf("exhausted counter = %v, want 1", got[telemetry.MetricExhausted])
				}
				if v := got[telemetry.MetricAttempts][attrs]; v != int64(tt.failures) {
					t.Errorf("attempts counter = %v, want %d", got[telemetry.MetricAttempts], tt.failures)
				}
			})
		})
	}
}

// A rejection after a wait the error asked for (no schedule built) is
// handled the same: the call's state is built for every retry.
func TestRejectionAfterRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := mustNew(t, Config{Name: "api"})
		cause := retryAfterErr{time.Second}
		res := run(t.Context(), r, func(n int) error {
			if n == 1 {
				return cause
			}
			return rejOpen
		})
		var ee *ExhaustedError
		if res.calls != 2 || !errors.As(res.err, &ee) || ee.Reason != ReasonRejected || ee.Err != cause ||
			ee.Rejection != rejOpen || errors.Is(res.err, policy.ErrRejected) {
			t.Errorf("calls = %d, err = %v; want 2, exhausted by the rejection, wrapping the 429", res.calls, res.err)
		}
	})
}

// A rejection after an attempt that ran fn is never returned unchanged,
// and ends the call as exhausted even when the call's context has ended
// meanwhile: the refusal was counted where it was decided.
func TestRejectionAfterAttemptRanContextDone(t *testing.T) {
	r := mustNew(t, Config{NewSchedule: zeroWaits})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res := run(ctx, r, func(n int) error {
		if n == 1 {
			return errBoom
		}
		cancel()
		return rejOpen
	})
	var ee *ExhaustedError
	if res.calls != 2 || !errors.As(res.err, &ee) || ee.Reason != ReasonRejected || ee.Err != errBoom || ee.Rejection != rejOpen {
		t.Errorf("calls = %d, err = %v; want 2, exhausted by the rejection, wrapping fn's last error", res.calls, res.err)
	}
}

// Through the loop compose drives: Next remembers the previous attempt's
// error. A state whose remembered error is itself a rejection (which the
// loop never builds, since a rejection ends it) does not make a later
// rejection an exhaustion.
func TestNextRejectionAfterFailure(t *testing.T) {
	r := mustNew(t, Config{MaxAttempts: 4, NewSchedule: zeroWaits})
	// Attempt 1 rejected: fn never ran, the rejection is the outcome.
	if again, _, final := r.Next(t.Context(), 1, rejOpen, nil); again || final != rejOpen {
		t.Errorf("rejection on attempt 1: again = %v, final = %v; want the rejection unchanged", again, final)
	}
	again, s1, _ := r.Next(t.Context(), 1, errBoom, nil)
	if !again || s1 == nil {
		t.Fatalf("Next(errBoom) = %v, %v", again, s1)
	}
	again, _, final := r.Next(t.Context(), 2, rejOpen, s1)
	var ee *ExhaustedError
	if again || !errors.As(final, &ee) || ee.Attempts != 1 || ee.Err != errBoom || ee.Rejection != rejOpen {
		t.Errorf("rejection on attempt 2: again = %v, final = %v", again, final)
	}
	other := policy.NewRejectedError("bulkhead", "b", "full", nil)
	if again, _, final := r.Next(t.Context(), 2, rejOpen, &call{last: other}); again || final != rejOpen {
		t.Errorf("rejection after a rejection: again = %v, final = %v; want the rejection unchanged", again, final)
	}
}

// The message of an ExhaustedError built by hand with ReasonRejected.
func TestExhaustedErrorRejectedMessage(t *testing.T) {
	tests := []struct {
		e    *ExhaustedError
		want string
	}{
		{&ExhaustedError{Reason: ReasonRejected}, "retry: gave up after 0 attempts: attempt 1 was rejected"},
		{&ExhaustedError{Name: "x", Attempts: 2, Reason: ReasonRejected, Rejection: &policy.RejectedError{}, Err: errBoom},
			`retry "x": gave up after 2 attempts: attempt 3 was rejected (policy rejected the call): boom`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}
