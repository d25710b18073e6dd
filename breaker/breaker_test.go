package breaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
)

func TestConsecutiveTripsOnNth(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		n    int
	}{
		{"default is 5", Config{}, 5},
		{"MinRequests alone is ignored", Config{MinRequests: 2}, 5},
		{"1", Config{ConsecutiveFailures: 1}, 1},
		{"3", Config{ConsecutiveFailures: 3}, 3},
		{"6", Config{ConsecutiveFailures: 6}, 6},
		{"3 beside a ratio rule that cannot trip", Config{ConsecutiveFailures: 3, FailureRatio: 1, MinRequests: 100}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBreaker(t, tt.cfg)
				for i := 1; i < tt.n; i++ {
					if err, _ := call(b, errBoom); err != errBoom {
						t.Fatalf("failure %d: err = %v", i, err)
					}
					if s := b.State(); s != Closed {
						t.Fatalf("after %d failures: %v, want closed", i, s)
					}
				}
				call(b, errBoom)
				if s := b.State(); s != Open {
					t.Fatalf("after %d failures: %v, want open", tt.n, s)
				}
				err, ran := call(b, nil)
				if ran {
					t.Fatal("fn ran while open")
				}
				wantRejected(t, err, "", ReasonOpen)
			})
		})
	}
}

func TestSuccessEndsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{ConsecutiveFailures: 3})
		for _, err := range []error{errBoom, errBoom, nil, errBoom, errBoom} {
			call(b, err)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("state = %v, want closed: a success ends the run", s)
		}
		call(b, errBoom)
		if s := b.State(); s != Open {
			t.Fatalf("state = %v, want open", s)
		}
	})
}

// outcome turns a letter into fn's error: F failure, S success, X excluded.
func outcome(c rune) error {
	switch c {
	case 'F':
		return errBoom
	case 'X':
		return context.Canceled
	}
	return nil
}

func TestRatioRule(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		outcomes string
		want     State
	}{
		{"below MinRequests", Config{FailureRatio: 0.5, MinRequests: 4}, "FFF", Closed},
		{"MinRequests reached", Config{FailureRatio: 0.5, MinRequests: 4}, "FFSF", Open},
		{"ratio exactly met", Config{FailureRatio: 0.5, MinRequests: 4}, "SSFF", Open},
		{"ratio not met", Config{FailureRatio: 0.5, MinRequests: 4}, "SSSFF", Closed},
		{"0.3 of 10 exactly", Config{FailureRatio: 0.3}, "SSSSSSSFFF", Open},
		{"0.3 not met", Config{FailureRatio: 0.3}, "SSSSSSSSFF", Closed},
		{"0.28 of 25 exactly (0.28*25 > 7 in float64)", Config{FailureRatio: 0.28, MinRequests: 25}, strings.Repeat("S", 18) + "FFFFFFF", Open},
		{"default MinRequests 10", Config{FailureRatio: 0.5}, "FFFFFFFFF", Closed},
		{"default MinRequests 10 reached", Config{FailureRatio: 0.5}, "FFFFFFFFFF", Open},
		{"consecutive rule off with ratio set", Config{FailureRatio: 0.9}, "SFFFFFFFF", Closed},
		{"excluded not in the denominator", Config{FailureRatio: 0.5, MinRequests: 4}, "SSXXFF", Open},
		{"excluded not failures", Config{FailureRatio: 0.5, MinRequests: 4}, "XXXXF", Closed},
		{"consecutive rule trips first", Config{ConsecutiveFailures: 2, FailureRatio: 0.9, MinRequests: 100}, "SFF", Open},
		{"ratio rule trips first", Config{ConsecutiveFailures: 10, FailureRatio: 0.5, MinRequests: 4}, "FSFSF", Open},
		{"ratio 1", Config{FailureRatio: 1, MinRequests: 3}, "FFSFFF", Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBreaker(t, tt.cfg)
				for i, c := range tt.outcomes {
					if s := b.State(); s != Closed {
						t.Fatalf("open after %q, before the last outcome", tt.outcomes[:i])
					}
					call(b, outcome(c))
				}
				if s := b.State(); s != tt.want {
					t.Fatalf("after %q: %v, want %v", tt.outcomes, s, tt.want)
				}
			})
		})
	}
}

func TestWindowAgesOut(t *testing.T) {
	const window = 10 * time.Second
	type step struct {
		sleep    time.Duration
		outcomes string
	}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
		want  State
	}{
		{"ratio: kept until Window", Config{FailureRatio: 0.5, MinRequests: 4, Window: window},
			[]step{{0, "FFF"}, {window - 1, "F"}}, Open},
		{"ratio: gone at Window", Config{FailureRatio: 0.5, MinRequests: 4, Window: window},
			[]step{{0, "FFF"}, {window, "F"}}, Closed},
		{"ratio: rolling, only the oldest bucket goes", Config{FailureRatio: 0.5, MinRequests: 4, Window: window},
			[]step{{0, "F"}, {window / 2, "FF"}, {window / 2, "F"}}, Closed},
		{"ratio: rolling, the rest stays", Config{FailureRatio: 0.5, MinRequests: 4, Window: window},
			[]step{{0, "F"}, {window / 2, "FF"}, {window / 2, "FF"}}, Open},
		{"ratio: default Window 60s keeps", Config{FailureRatio: 0.5, MinRequests: 4},
			[]step{{0, "FFF"}, {59 * time.Second, "F"}}, Open},
		{"ratio: default Window 60s forgets", Config{FailureRatio: 0.5, MinRequests: 4},
			[]step{{0, "FFF"}, {60 * time.Second, "F"}}, Closed},
		{"consecutive without Window never forgets", Config{ConsecutiveFailures: 3},
			[]step{{0, "FF"}, {time.Hour, "F"}}, Open},
		{"consecutive with Window forgets", Config{ConsecutiveFailures: 3, Window: window},
			[]step{{0, "FF"}, {window, "F"}}, Closed},
		{"consecutive with Window keeps", Config{ConsecutiveFailures: 3, Window: window},
			[]step{{0, "FF"}, {window - 1, "F"}}, Open},
		{"tiny Window", Config{ConsecutiveFailures: 2, Window: 5},
			[]step{{0, "F"}, {5, "F"}}, Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBreaker(t, tt.cfg)
				for _, st := range tt.steps {
					time.Sleep(st.sleep)
					for _, c := range st.outcomes {
						call(b, outcome(c))
					}
				}
				if s := b.State(); s != tt.want {
					t.Fatalf("state = %v, want %v", s, tt.want)
				}
			})
		})
	}
}

// timeoutErr is a timeout error of our own, like deadline's ExceededError.
type timeoutErr struct{}

func (timeoutErr) Error() string        { return "deadline: exceeded" }
func (timeoutErr) Is(target error) bool { return target == context.DeadlineExceeded }

func TestClassification(t *testing.T) {
	// Each error is reported between two failures with ConsecutiveFailures
	// 2: a failure trips at once, an excluded outcome neither trips nor
	// ends the run (the next failure trips), a success ends the run.
	const (
		failure = iota
		excluded
		success
	)
	onlyBoom := func(err error) bool { return errors.Is(err, errBoom) }
	tests := []struct {
		name      string
		isFailure func(error) bool
		err       error
		want      int
	}{
		{"nil", nil, nil, success},
		{"plain error", nil, errBenign, failure},
		{"context.DeadlineExceeded", nil, context.DeadlineExceeded, failure},
		{"our timeout", nil, fmt.Errorf("call: %w", timeoutErr{}), failure},
		{"ErrAborted", nil, policy.ErrAborted, failure},
		{"context.Canceled", nil, context.Canceled, excluded},
		{"wrapped context.Canceled", nil, fmt.Errorf("read: %w", context.Canceled), excluded},
		{"ErrRejected", nil, policy.ErrRejected, excluded},
		{"another policy's rejection", nil, policy.NewRejectedError("bulkhead", "db", "full", nil), excluded},
		{"another breaker's ErrOpen", nil, fmt.Errorf("inner: %w", ErrOpen), excluded},
		{"custom: failure", onlyBoom, fmt.Errorf("x: %w", errBoom), failure},
		{"custom: success", onlyBoom, errBenign, success},
		{"custom: DeadlineExceeded success", onlyBoom, context.DeadlineExceeded, success},
		{"custom cannot count Canceled", func(error) bool { return true }, context.Canceled, excluded},
		{"custom cannot count a rejection", func(error) bool { return true }, ErrOpen, excluded},
		{"custom cannot pardon ErrAborted", onlyBoom, policy.ErrAborted, failure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBreaker(t, Config{ConsecutiveFailures: 2, IsFailure: tt.isFailure})
				if err := report(b, errBoom); err != errBoom {
					t.Fatalf("Exit returned %v, want errBoom unchanged", err)
				}
				if got := report(b, tt.err); got != tt.err {
					t.Fatalf("Exit returned %v, want %v unchanged", got, tt.err)
				}
				after := b.State()
				report(b, errBoom)
				var got int
				switch {
				case after == Open:
					got = failure
				case b.State() == Open:
					got = excluded
				default:
					got = success
				}
				if got != tt.want {
					t.Fatalf("%v counted as %d, want %d (0 failure, 1 excluded, 2 success)", tt.err, got, tt.want)
				}
			})
		})
	}
}

func TestCustomIsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []error
		b := newBreaker(t, Config{ConsecutiveFailures: 2, IsFailure: func(err error) bool {
			seen = append(seen, err)
			return errors.Is(err, errBoom)
		}})
		for range 10 {
			call(b, errBenign)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("benign errors opened it: %v", s)
		}
		call(b, errBoom)
		call(b, errBoom)
		if s := b.State(); s != Open {
			t.Fatalf("state = %v, want open", s)
		}
		if len(seen) != 12 || slices.Contains(seen, nil) {
			t.Fatalf("IsFailure saw %d errors (%v), want the 12 non-nil ones", len(seen), seen)
		}
	})
}

func TestOpenTimeoutExact(t *testing.T) {
	tests := []struct {
		name       string
		cfg        time.Duration
		want       time.Duration
		probeFirst bool // at OpenTimeout, call before asking State
	}{
		{"default 30s", 0, 30 * time.Second, false},
		{"default 30s, probe first", 0, 30 * time.Second, true},
		{"5s", 5 * time.Second, 5 * time.Second, false},
		{"5s, probe first", 5 * time.Second, 5 * time.Second, true},
		{"50ns, probe first", 50, 50, true},
		{"2ns", 2, 2, false},
		{"2ns, probe first", 2, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: tt.cfg, OnStateChange: log.hook})
				call(b, errBoom)
				time.Sleep(tt.want - 1)
				err, ran := call(b, nil)
				if ran {
					t.Fatal("fn ran 1ns before OpenTimeout")
				}
				wantRejected(t, err, "", ReasonOpen)
				if s := b.State(); s != Open {
					t.Fatalf("1ns before OpenTimeout: %v, want open", s)
				}
				time.Sleep(1)
				if !tt.probeFirst {
					// State alone, with no call, moves it on.
					if s := b.State(); s != HalfOpen {
						t.Fatalf("at OpenTimeout: %v, want half-open", s)
					}
					want := []string{"closed->open", "open->half-open"}
					if got := log.list(); !slices.Equal(got, want) {
						t.Fatalf("transitions = %v, want %v", got, want)
					}
				}
				if err, ran := call(b, nil); err != nil || !ran {
					t.Fatalf("probe at OpenTimeout: err %v, ran %v", err, ran)
				}
				if s := b.State(); s != Closed {
					t.Fatalf("after the probe: %v, want closed", s)
				}
				want := []string{"closed->open", "open->half-open", "half-open->closed"}
				if got := log.list(); !slices.Equal(got, want) {
					t.Fatalf("transitions = %v, want %v", got, want)
				}
			})
		})
	}
}

func TestHalfOpenProbes(t *testing.T) {
	tests := []struct {
		name   string
		cfg    uint32
		probes int
	}{
		{"default 1", 0, 1},
		{"3", 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				b := newBreaker(t, Config{Name: "llm", ConsecutiveFailures: 1, OpenTimeout: time.Second,
					HalfOpenRequests: tt.cfg, OnStateChange: log.hook})
				call(b, errBoom)
				time.Sleep(time.Second)
				var tokens []Permit
				for i := range tt.probes {
					_, tok, err := b.Enter(context.Background())
					if err != nil {
						t.Fatalf("probe %d rejected: %v", i+1, err)
					}
					tokens = append(tokens, tok)
				}
				for range 3 {
					_, _, err := b.Enter(context.Background())
					wantRejected(t, err, "llm", ReasonHalfOpenFull)
				}
				for i, tok := range tokens {
					if s := b.State(); s != HalfOpen {
						t.Fatalf("after %d successful probes: %v, want half-open", i, s)
					}
					b.Exit(context.Background(), tok, nil)
				}
				if s := b.State(); s != Closed {
					t.Fatalf("after %d successful probes: %v, want closed", tt.probes, s)
				}
				want := []string{"closed->open", "open->half-open", "half-open->closed"}
				if got := log.list(); !slices.Equal(got, want) {
					t.Fatalf("transitions = %v, want %v", got, want)
				}
			})
		})
	}
}

func TestExcludedProbeFreesItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second})
		call(b, errBoom)
		time.Sleep(time.Second)
		_, tok, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = b.Enter(context.Background())
		wantRejected(t, err, "", ReasonHalfOpenFull)
		b.Exit(context.Background(), tok, context.Canceled)
		if s := b.State(); s != HalfOpen {
			t.Fatalf("after a canceled probe: %v, want half-open", s)
		}
		if err := report(b, nil); err != nil {
			t.Fatalf("second probe: %v", err)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("state = %v, want closed", s)
		}
	})
}

func TestFailingProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenRequests: 2, OnStateChange: log.hook})
		call(b, errBoom)
		time.Sleep(time.Second)
		call(b, nil) // one good probe of two
		call(b, errBoom)
		if s := b.State(); s != Open {
			t.Fatalf("after a failed probe: %v, want open", s)
		}
		time.Sleep(time.Second - 1)
		if s := b.State(); s != Open {
			t.Fatalf("OpenTimeout restarts on reopening: %v, want open", s)
		}
		time.Sleep(1)
		call(b, nil)
		call(b, nil)
		want := []string{"closed->open", "open->half-open", "half-open->open", "open->half-open", "half-open->closed"}
		if got := log.list(); !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
	})
}

func TestAbortedProbeDoesNotWedge(t *testing.T) {
	onlyBoom := func(err error) bool { return errors.Is(err, errBoom) }
	tests := []struct {
		name      string
		isFailure func(error) bool
		fn        policy.Func
	}{
		{"panic", nil, func(context.Context) error { panic("probe") }},
		{"panic(nil)", nil, func(context.Context) error { panic(nil) }},
		{"goexit", nil, func(context.Context) error { runtime.Goexit(); return nil }},
		{"panic, IsFailure only errBoom", onlyBoom, func(context.Context) error { panic("probe") }},
		{"goexit, IsFailure only errBoom", onlyBoom, func(context.Context) error { runtime.Goexit(); return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var log hookLog
				b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, IsFailure: tt.isFailure, OnStateChange: log.hook})
				call(b, errBoom)
				time.Sleep(time.Second)
				returned, wentOn, recovered := runAborting(func() { b.Execute(context.Background(), tt.fn) })
				panicked := strings.HasPrefix(tt.name, "panic")
				if returned || wentOn != panicked {
					t.Fatalf("Execute returned %v, the caller went on after recovering %v; want the panic or Goexit passed on", returned, wentOn)
				}
				if panicked && tt.name != "panic(nil)" && recovered != "probe" {
					t.Fatalf("panic not passed on as it is: recovered %v", recovered)
				}
				if s := b.State(); s != Open {
					t.Fatalf("after an aborted probe: %v, want open", s)
				}
				time.Sleep(time.Second)
				if err, ran := call(b, nil); err != nil || !ran {
					t.Fatalf("next probe: err %v, ran %v", err, ran)
				}
				if s := b.State(); s != Closed {
					t.Fatalf("state = %v, want closed", s)
				}
				want := []string{"closed->open", "open->half-open", "half-open->open", "open->half-open", "half-open->closed"}
				if got := log.list(); !slices.Equal(got, want) {
					t.Fatalf("transitions = %v, want %v", got, want)
				}
			})
		})
	}
}

func TestForceOpenReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		b := newBreaker(t, Config{Name: "db", ConsecutiveFailures: 3, OpenTimeout: time.Second, OnStateChange: log.hook})
		call(b, errBoom)
		call(b, errBoom)
		b.ForceOpen()
		b.ForceOpen()
		if s := b.State(); s != Open {
			t.Fatalf("forced: %v, want open", s)
		}
		err, ran := call(b, nil)
		if ran {
			t.Fatal("fn ran while forced open")
		}
		wantRejected(t, err, "db", ReasonOpen)
		time.Sleep(time.Hour) // no timeout ends a forced open
		if s := b.State(); s != Open {
			t.Fatalf("forced, an hour later: %v, want open", s)
		}
		_, _, err = b.Enter(context.Background())
		wantRejected(t, err, "db", ReasonOpen)

		b.Reset()
		if s := b.State(); s != Closed {
			t.Fatalf("after Reset: %v, want closed", s)
		}
		// Fresh counts: the two failures before ForceOpen are gone.
		call(b, errBoom)
		call(b, errBoom)
		if s := b.State(); s != Closed {
			t.Fatalf("counts not fresh after Reset: %v", s)
		}
		call(b, errBoom)
		if s := b.State(); s != Open {
			t.Fatalf("state = %v, want open", s)
		}
		// Reset also closes a breaker its rules opened.
		b.Reset()
		b.Reset()
		if err, ran := call(b, nil); err != nil || !ran {
			t.Fatalf("after Reset: err %v, ran %v", err, ran)
		}
		want := []string{"closed->open", "open->closed", "closed->open", "open->closed"}
		if got := log.list(); !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
	})
}

func TestForcedIgnoresLateOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, OnStateChange: log.hook})
		call(b, errBoom)
		time.Sleep(time.Second)
		ctx, tok, err := b.Enter(context.Background()) // a probe
		if err != nil {
			t.Fatal(err)
		}
		b.ForceOpen()
		b.Exit(ctx, tok, nil) // closes gobreaker, not the forced breaker
		if s := b.State(); s != Open {
			t.Fatalf("forced, after a good probe: %v, want open", s)
		}
		if _, ran := call(b, nil); ran {
			t.Fatal("fn ran while forced open")
		}
		want := []string{"closed->open", "open->half-open", "half-open->open"}
		if got := log.list(); !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
	})
}

func TestResetDropsLateOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OnStateChange: log.hook})
		ctx, tok, err := b.Enter(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b.Reset()
		if got := b.Exit(ctx, tok, errBoom); got != errBoom {
			t.Fatalf("Exit returned %v", got)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("an outcome from before Reset tripped it: %v", s)
		}
		if err, ran := call(b, nil); err != nil || !ran {
			t.Fatalf("after a late failure: err %v, ran %v", err, ran)
		}
		if got := log.list(); len(got) != 0 {
			t.Fatalf("the replaced machine's changes were reported: %v", got)
		}
	})
}

func TestOnReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type rec struct {
			ctx context.Context
			err *policy.RejectedError
		}
		var got []rec
		b := newBreaker(t, Config{Name: "x", ConsecutiveFailures: 1, OpenTimeout: time.Second,
			OnReject: func(ctx context.Context, err *policy.RejectedError) { got = append(got, rec{ctx, err}) }})
		type key struct{}
		ctx := context.WithValue(context.Background(), key{}, 1)
		call(b, errBoom)
		err1 := b.Execute(ctx, func(context.Context) error { return nil })
		time.Sleep(time.Second)
		_, tok, _ := b.Enter(ctx)
		err2 := b.Execute(ctx, func(context.Context) error { return nil })
		b.Exit(ctx, tok, nil)
		if len(got) != 2 || got[0].ctx != ctx || got[1].ctx != ctx {
			t.Fatalf("OnReject calls = %v, want 2 with the caller's ctx", got)
		}
		if error(got[0].err) != err1 || got[0].err.Reason != ReasonOpen || error(got[1].err) != err2 || got[1].err.Reason != ReasonHalfOpenFull {
			t.Fatalf("OnReject errors = %v %v, want the returned rejections", got[0].err, got[1].err)
		}
		// Rejections are prepared: the same value every time.
		if err3, _ := call(b, nil); err3 != nil {
			t.Fatal(err3)
		}
	})
}

func TestHooksMayCallBreaker(t *testing.T) {
	// A hook calling State, ForceOpen or Reset must not deadlock (gobreaker
	// calls OnStateChange under its mutex); changes it causes are reported
	// after it returns, in order. A deadlock would hang the goroutine, so
	// it runs under a guard.
	done := make(chan []string)
	go func() {
		var b *Breaker
		var got []string
		b, _ = New(Config{ConsecutiveFailures: 1, OnStateChange: func(from, to State) {
			got = append(got, fmt.Sprintf("%v->%v (State %v)", from, to, b.State()))
			if to == Open && len(got) == 1 {
				b.Reset() // reported after this hook returns
				got = append(got, "reset done")
			}
		}})
		defer b.Close()
		call(b, errBoom)
		b.ForceOpen()
		done <- got
	}()
	select {
	case got := <-done:
		want := []string{"closed->open (State open)", "reset done", "open->closed (State closed)", "closed->open (State open)"}
		if !slices.Equal(got, want) {
			t.Fatalf("hooks = %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("deadlock: a hook calling the Breaker never returned")
	}
}

func TestPanickingHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log hookLog
		panicOn := "open->half-open"
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, OnStateChange: func(from, to State) {
			log.hook(from, to)
			if from.String()+"->"+to.String() == panicOn {
				panicOn = ""
				panic("hook")
			}
		}})
		call(b, errBoom)
		time.Sleep(time.Second)
		// The change to half-open is reported by Enter, after gobreaker
		// admitted this probe: the hook's panic must not leave the probe
		// holding the only half-open place.
		func() {
			defer func() {
				if r := recover(); r != "hook" {
					t.Fatalf("recovered %v, want the hook's panic", r)
				}
			}()
			call(b, nil)
			t.Fatal("no panic")
		}()
		// The probe never ran: its place is freed and nothing is counted,
		// so the breaker stays half-open and the next probe closes it.
		if s := b.State(); s != HalfOpen {
			t.Fatalf("after the hook's panic: %v, want half-open (the probe excluded, not failed)", s)
		}
		call(b, nil)
		if s := b.State(); s != Closed {
			t.Fatalf("state = %v, want closed", s)
		}
		want := []string{"closed->open", "open->half-open", "half-open->closed"}
		if got := log.list(); !slices.Equal(got, want) {
			t.Fatalf("transitions = %v, want %v", got, want)
		}
	})
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" if valid
	}{
		{"zero", Config{}, ""},
		{"FailureRatio 1", Config{FailureRatio: 1}, ""},
		{"FailureRatio tiny", Config{FailureRatio: math.SmallestNonzeroFloat64}, ""},
		{"MinRequests without FailureRatio", Config{MinRequests: 7}, ""},
		{"ConsecutiveFailures max", Config{ConsecutiveFailures: math.MaxUint32}, ""},
		{"Window and OpenTimeout 1ns", Config{Window: 1, OpenTimeout: 1}, ""},
		{"FailureRatio negative", Config{FailureRatio: -0.1}, "FailureRatio"},
		{"FailureRatio above 1", Config{FailureRatio: 1.0000001}, "FailureRatio"},
		{"FailureRatio NaN", Config{FailureRatio: math.NaN()}, "FailureRatio"},
		{"FailureRatio +Inf", Config{FailureRatio: math.Inf(1)}, "FailureRatio"},
		{"FailureRatio -Inf", Config{FailureRatio: math.Inf(-1)}, "FailureRatio"},
		{"Window negative", Config{Window: -1}, "Window"},
		{"OpenTimeout negative", Config{OpenTimeout: -time.Second}, "OpenTimeout"},
		{"slow rule", Config{SlowCallRatio: 1, SlowCallDuration: time.Second}, ""},
		{"slow rule tiny ratio", Config{SlowCallRatio: math.SmallestNonzeroFloat64, SlowCallDuration: 1}, ""},
		{"SlowCallMinCalls without the rule", Config{SlowCallMinCalls: 3}, ""},
		{"SlowCallRatio negative", Config{SlowCallRatio: -0.1, SlowCallDuration: time.Second}, "SlowCallRatio"},
		{"SlowCallRatio above 1", Config{SlowCallRatio: 1.0000001, SlowCallDuration: time.Second}, "SlowCallRatio"},
		{"SlowCallRatio NaN", Config{SlowCallRatio: math.NaN(), SlowCallDuration: time.Second}, "SlowCallRatio"},
		{"SlowCallRatio +Inf", Config{SlowCallRatio: math.Inf(1), SlowCallDuration: time.Second}, "SlowCallRatio"},
		{"SlowCallDuration 0 with the rule", Config{SlowCallRatio: 0.5}, "SlowCallDuration"},
		{"SlowCallDuration negative with the rule", Config{SlowCallRatio: 0.5, SlowCallDuration: -1}, "SlowCallDuration"},
		{"SlowCallDuration without the rule", Config{SlowCallDuration: time.Second}, "SlowCallDuration"},
		{"SlowCallDuration negative without the rule", Config{SlowCallDuration: -time.Second}, "SlowCallDuration"},
		{"SlowCallDuration 9/10 of the default Window", Config{SlowCallRatio: 0.5, SlowCallDuration: DefaultWindow * 9 / 10}, ""},
		{"SlowCallDuration over 9/10 of the default Window", Config{SlowCallRatio: 0.5, SlowCallDuration: DefaultWindow*9/10 + 1}, "SlowCallDuration"},
		{"SlowCallDuration 9.5/10 of Window", Config{SlowCallRatio: 0.5, SlowCallDuration: 9500 * time.Millisecond, Window: 10 * time.Second}, "SlowCallDuration"},
		{"SlowCallDuration > Window", Config{SlowCallRatio: 0.5, SlowCallDuration: 2 * time.Second, Window: time.Second}, "SlowCallDuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				b.Close()
				return
			}
			if err == nil {
				b.Close()
				t.Fatal("New accepted an invalid Config")
			}
			if b != nil {
				t.Fatal("New returned a Breaker with its error")
			}
			if !strings.HasPrefix(err.Error(), "breaker: Config."+tt.field+" ") {
				t.Fatalf("err = %q, want it to start with breaker: Config.%s", err, tt.field)
			}
		})
	}
}

func TestNilPanics(t *testing.T) {
	b := newBreaker(t, Config{})
	fn := func(context.Context) error { return nil }
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"Execute nil ctx", func() { b.Execute(nil, fn) }, "breaker: nil Context"}, //nolint:staticcheck // the point
		{"Execute nil fn", func() { b.Execute(context.Background(), nil) }, "breaker: nil fn"},
		{"Enter nil ctx", func() { b.Enter(nil) }, "breaker: nil Context"}, //nolint:staticcheck // the point
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != tt.want {
					t.Fatalf("recovered %v, want %q", r, tt.want)
				}
			}()
			tt.f()
		})
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", HalfOpen: "half-open", Open: "open", 7: "breaker.State(7)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
	if Closed != 0 || HalfOpen != 1 || Open != 2 {
		t.Fatal("State values changed: 0 closed, 1 half-open, 2 open (the order gobreaker uses)")
	}
}

func TestHalfOpenConcurrentLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const probes, callers = 3, 50
		b := newBreaker(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenRequests: probes})
		call(b, errBoom)
		time.Sleep(time.Second)
		var mu sync.Mutex
		var tokens []Permit
		rejected := 0
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				<-start
				_, tok, err := b.Enter(context.Background())
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if errors.Is(err, ErrOpen) {
						rejected++
					}
					return
				}
				tokens = append(tokens, tok)
			})
		}
		close(start)
		wg.Wait()
		if len(tokens) != probes || rejected != callers-probes {
			t.Fatalf("admitted %d, rejected %d; want %d and %d", len(tokens), rejected, probes, callers-probes)
		}
		for _, tok := range tokens {
			b.Exit(context.Background(), tok, nil)
		}
		if s := b.State(); s != Closed {
			t.Fatalf("state = %v, want closed", s)
		}
	})
}
