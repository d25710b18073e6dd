package bench

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/failsafe-go/failsafe-go"
	fsbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/watertight/watertight/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSetups runs every setup the benchmarks use once, so that a broken
// setup fails `go test` rather than a long benchmark run.
func TestSetups(t *testing.T) {
	mp, tp := sdkProviders(t)
	tests := []struct {
		name string
		call func(t *testing.T) error
		want error
	}{
		{"watertight bulkhead", func(t *testing.T) error { return wtBulkhead(t, bigLimit, 0, 0, nil).Execute(bg, work) }, nil},
		{"watertight deadline", func(t *testing.T) error { return wtDeadline(t, nil).Execute(bg, work) }, nil},
		{"watertight retry", func(t *testing.T) error { return wtRetry(t, nil).Execute(bg, work) }, nil},
		{"watertight retry failing", func(t *testing.T) error { return wtRetry(t, nil).Execute(bg, fail) }, errBoom},
		{"watertight breaker", func(t *testing.T) error { return wtBreaker(t, nil).Execute(bg, work) }, nil},
		{"watertight breaker open", func(t *testing.T) error {
			c := wtBreaker(t, nil)
			c.ForceOpen()
			return c.Execute(bg, work)
		}, policy.ErrRejected},
		{"watertight composed", func(t *testing.T) error { return wtComposed(t, providers{}).Execute(bg, work) }, nil},
		{"watertight composed sdk", func(t *testing.T) error {
			return wtComposed(t, providers{mp: mp, tp: tp}).Execute(bg, work)
		}, nil},
		{"failsafe bulkhead", func(*testing.T) error { return fsExec(fsBulkhead(bigLimit, 0)).RunWithExecution(fsWork) }, nil},
		{"failsafe timeout", func(*testing.T) error { return fsExec(fsTimeout()).RunWithExecution(fsWork) }, nil},
		{"failsafe retry", func(*testing.T) error { return fsExec(fsRetry()).RunWithExecution(fsWork) }, nil},
		{"failsafe retry failing", func(*testing.T) error { return fsExec(fsRetry()).RunWithExecution(fsFail) }, errBoom},
		{"failsafe breaker", func(*testing.T) error { return fsExec(fsBreaker()).RunWithExecution(fsWork) }, nil},
		{"failsafe breaker open", func(*testing.T) error {
			cb := fsBreaker()
			cb.Open()
			return fsExec(cb).RunWithExecution(fsWork)
		}, fsbreaker.ErrOpen},
		{"failsafe composed", func(*testing.T) error { return fsComposed().RunWithExecution(fsWork) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(t); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestRetryFailingAttempts checks that both retries make exactly 3
// attempts, so BenchmarkRetryFailing compares the same work.
func TestRetryFailingAttempts(t *testing.T) {
	var wt, fs int
	wtRetry(t, nil).Execute(bg, func(ctx context.Context) error { wt++; return errBoom })
	fsExec(fsRetry()).RunWithExecution(func(failsafe.Execution[any]) error { fs++; return errBoom })
	if wt != maxAttempts || fs != maxAttempts {
		t.Fatalf("attempts: watertight %d, failsafe %d, want %d each", wt, fs, maxAttempts)
	}
}
