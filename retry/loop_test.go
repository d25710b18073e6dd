package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// A Loop ends as Execute does: nil at the first success, the rules' error
// otherwise, and a Permanent failure unmarked at once.
func TestLoopEndsAsExecuteDoes(t *testing.T) {
	r, err := retry.New(retry.Config{MaxAttempts: 4, InitialInterval: time.Microsecond, Jitter: -1})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tt := range []struct {
		name    string
		results []error
		want    func(error) bool
		runs    int
	}{
		{"success at the second", []error{boom, nil}, func(err error) bool { return err == nil }, 2},
		{"exhausted", []error{boom, boom, boom, boom}, func(err error) bool { return errors.Is(err, retry.ErrExhausted) }, 4},
		{"permanent", []error{policy.Permanent(boom)}, func(err error) bool { return err == boom }, 1},
	} {
		l := r.Start(context.Background())
		runs := 0
		attempt := func(ctx context.Context) error {
			runs++
			if retry.Attempt(ctx) != runs {
				t.Fatalf("%s: attempt %d numbered %d", tt.name, runs, retry.Attempt(ctx))
			}
			return tt.results[runs-1]
		}
		for l.Next(attempt(l.Attempt())) {
		}
		if runs != tt.runs || !tt.want(l.Err()) {
			t.Errorf("%s: %d attempts, Err %v", tt.name, runs, l.Err())
		}
		ex := 0
		errEx := r.Execute(context.Background(), func(context.Context) error { ex++; return tt.results[ex-1] })
		if ex != tt.runs || !tt.want(errEx) {
			t.Errorf("%s: Execute ran %d, returned %v", tt.name, ex, errEx)
		}
	}
}
