package retry_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

var (
	errFuzzAttempt = errors.New("attempt failed")
	errFuzzStop    = errors.New("stop")
)

// FuzzConfig builds a Config from fuzzed fields and checks that New never
// panics and either returns an error that starts with "retry: Config." and
// names the first field the documented rules make invalid (exactly when one
// is), or a Retry that runs a call; with MaxInterval up to an hour it also
// runs a call that fails three times and then permanently, in fake time,
// and checks the attempts, the end (exhausted after MaxAttempts, or the
// permanent error itself) and that every wait is within [0, MaxInterval].
func FuzzConfig(f *testing.F) {
	ms := int64(time.Millisecond)
	for _, s := range []struct {
		attempts     int
		initial, max int64
		jitter       float64
	}{
		{0, 0, 0, 0}, {1, ms, ms, -1}, {math.MaxInt, 1, math.MaxInt64, 1},
		{-1, 0, 0, 0}, {3, -1, 0, 0}, {3, 0, -1, 0}, {3, 2 * ms, ms, 0},
		{3, 0, 0, math.NaN()}, {3, 0, 0, 1.5}, {3, 0, 0, -0.5}, {3, 0, 0, math.Inf(-1)}, {5, ms, int64(time.Hour), 0.9},
	} {
		f.Add("fuzz", s.attempts, s.initial, s.max, s.jitter)
	}
	f.Fuzz(func(t *testing.T, name string, attempts int, initial, maxInterval int64, jitter float64) {
		cfg := retry.Config{
			Name: name, MaxAttempts: attempts, InitialInterval: time.Duration(initial),
			MaxInterval: time.Duration(maxInterval), Jitter: jitter,
		}
		// The documented rules, in the documented order.
		resAttempts, resInitial, resMax := attempts, initial, maxInterval
		if resAttempts == 0 {
			resAttempts = 3
		}
		if resInitial == 0 {
			resInitial = int64(100 * time.Millisecond)
		}
		if resMax == 0 {
			resMax = int64(10 * time.Second)
		}
		var wantField string
		switch {
		case resAttempts < 1:
			wantField = "MaxAttempts"
		case resInitial < 0:
			wantField = "InitialInterval"
		case resMax < 0, resMax < resInitial:
			wantField = "MaxInterval"
		case math.IsNaN(jitter) || jitter > 1:
			wantField = "Jitter"
		}
		var waits []time.Duration
		cfg.OnRetry = func(_ context.Context, _ int, _ error, wait time.Duration) { waits = append(waits, wait) }
		r, err := retry.New(cfg)
		if err != nil {
			if r != nil {
				t.Fatal("New returned a Retry and an error")
			}
			prefix := "retry: Config." + wantField
			if wantField == "" || !strings.HasPrefix(err.Error(), prefix+" ") {
				t.Fatalf("New(%+v) = %q; want an error starting %q", cfg, err, prefix)
			}
			return
		}
		if wantField != "" {
			t.Fatalf("New(%+v) accepted an invalid %s", cfg, wantField)
		}
		if retry.MaxAttemptsOf(r) != resAttempts {
			t.Fatalf("MaxAttempts() = %d; want %d", retry.MaxAttemptsOf(r), resAttempts)
		}
		if err := r.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Execute = %v", err)
		}
		if resMax > int64(time.Hour) {
			return
		}
		synctest.Test(t, func(t *testing.T) {
			waits = waits[:0]
			n := 0
			err := r.Execute(context.Background(), func(ctx context.Context) error {
				n++
				if retry.Attempt(ctx) != n {
					t.Errorf("Attempt = %d in attempt %d", retry.Attempt(ctx), n)
				}
				if n > 3 {
					return policy.Permanent(errFuzzStop)
				}
				return errFuzzAttempt
			})
			wantN := min(resAttempts, 4)
			if n != wantN {
				t.Fatalf("fn ran %d times; want %d", n, wantN)
			}
			if resAttempts <= 3 {
				var ex *retry.ExhaustedError
				if !errors.As(err, &ex) || ex.Attempts != resAttempts || !errors.Is(err, errFuzzAttempt) {
					t.Fatalf("Execute = %v; want exhausted after %d attempts", err, resAttempts)
				}
			} else if err != errFuzzStop {
				t.Fatalf("Execute = %v; want the permanent error itself", err)
			}
			if len(waits) != wantN-1 {
				t.Fatalf("%d waits for %d attempts", len(waits), wantN)
			}
			for _, w := range waits {
				if w < 0 || w > time.Duration(resMax) {
					t.Fatalf("wait %v outside [0, %v]", w, time.Duration(resMax))
				}
			}
		})
	})
}

// FuzzSchedule runs a call, in fake time, whose attempts all fail, with a
// Config.NewSchedule giving fuzzed waits (negative, zero, past MaxInterval)
// in turn and saying stop at a fuzzed call of Next, and checks that fn ran
// as often as MaxAttempts and the stop allow, that every wait is the
// schedule's clamped to [0, MaxInterval], and that the call ends exhausted
// for the right reason with the last attempt's error.
func FuzzSchedule(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(uint8(3), int64(time.Second), ms, 2*ms, 3*ms, uint8(0))
	f.Add(uint8(9), int64(time.Second), -ms, 0*ms, int64(time.Hour), uint8(3))
	f.Add(uint8(1), int64(1), int64(math.MaxInt64), int64(math.MinInt64), int64(1), uint8(1))
	f.Fuzz(func(t *testing.T, attempts uint8, maxInterval, w1, w2, w3 int64, stopAt uint8) {
		maxWait := time.Duration(1 + (maxInterval&math.MaxInt64)%int64(time.Hour))
		maxAttempts := 1 + int(attempts%12)
		planned := []time.Duration{time.Duration(w1), time.Duration(w2), time.Duration(w3)}
		var waits []time.Duration
		schedules := 0
		r, err := retry.New(retry.Config{
			MaxAttempts: maxAttempts, InitialInterval: 1, MaxInterval: maxWait,
			NewSchedule: func() backoff.BackOff {
				schedules++
				calls := 0
				return retry.ScheduleFunc(func() (time.Duration, bool) {
					calls++
					if calls == int(stopAt) {
						return 0, false
					}
					return planned[(calls-1)%len(planned)], true
				})
			},
			OnRetry: func(_ context.Context, _ int, _ error, wait time.Duration) { waits = append(waits, wait) },
		})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		synctest.Test(t, func(t *testing.T) {
			n := 0
			err := r.Execute(context.Background(), func(context.Context) error { n++; return errFuzzAttempt })
			wantN, wantReason := maxAttempts, retry.ReasonMaxAttempts
			if stopAt > 0 && int(stopAt) < maxAttempts {
				wantN, wantReason = int(stopAt), retry.ReasonStopped
			}
			var ex *retry.ExhaustedError
			if n != wantN || !errors.As(err, &ex) || ex.Attempts != wantN || ex.Reason != wantReason || !errors.Is(err, errFuzzAttempt) {
				t.Fatalf("fn ran %d times, err = %v; want %d attempts, exhausted (%s)", n, err, wantN, wantReason)
			}
			if wantSchedules := min(1, wantN-1+boolInt(wantReason == retry.ReasonStopped)); schedules != wantSchedules {
				t.Fatalf("%d schedules made, want %d", schedules, wantSchedules)
			}
			if len(waits) != wantN-1 {
				t.Fatalf("%d waits for %d attempts", len(waits), wantN)
			}
			for i, w := range waits {
				if want := min(max(planned[i%len(planned)], 0), maxWait); w != want {
					t.Fatalf("wait %d = %v, want %v", i+1, w, want)
				}
			}
		})
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
