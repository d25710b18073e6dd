package ratelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// fakeShared records what a Limiter asks of its shared quota.
type fakeShared struct {
	mu      sync.Mutex
	reject  error           // Take's answer
	wait    time.Duration   // Take sleeps this long, bounded by by
	takes   []int           // costs taken
	bys     []time.Time     // bounds given
	settled [][2]int        // {cost, used}
	holds   []time.Duration // holds asked
}

func (f *fakeShared) Take(ctx context.Context, cost int, by time.Time) error {
	f.mu.Lock()
	f.takes, f.bys = append(f.takes, cost), append(f.bys, by)
	rej, wait := f.reject, f.wait
	f.mu.Unlock()
	if rej != nil {
		return rej
	}
	if time.Now().Add(wait).After(by) {
		return policy.NewRejectedError("quota", "", ratelimit.ReasonRate, ratelimit.ErrLimited)
	}
	select {
	case <-time.After(wait):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeShared) Settle(cost, used int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, [2]int{cost, used})
}

func (f *fakeShared) Hold(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, d)
}

func newShared(t *testing.T, cfg ratelimit.Config) (*ratelimit.Limiter, *fakeShared) {
	t.Helper()
	f := &fakeShared{}
	cfg.Shared = f
	l, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, f
}

func TestSharedSettlesAtUsageCostOrZero(t *testing.T) {
	l, f := newShared(t, ratelimit.Config{})
	boom := errors.New("boom")
	cases := []struct {
		name   string
		report int // -2: no report
		err    error
		want   int
	}{
		{"reported success", 70, nil, 70},
		{"reported failure", 30, boom, 30},
		{"unreported success", -2, nil, 100},
		{"unreported failure", -2, boom, 0},
		{"negative report ignored", -5, nil, 100},
		{"zero report", 0, nil, 0},
	}
	for _, c := range cases {
		ctx := ratelimit.WithCost(context.Background(), 100)
		err := l.Execute(ctx, func(ctx context.Context) error {
			if c.report >= 0 {
				ratelimit.ReportUsage(ctx, 10) // replaced by the last report
			}
			if c.report != -2 {
				ratelimit.ReportUsage(ctx, c.report)
			}
			return c.err
		})
		if !errors.Is(err, c.err) {
			t.Fatalf("%s: Execute = %v", c.name, err)
		}
		if got := f.settled[len(f.settled)-1]; got != [2]int{100, c.want} {
			t.Errorf("%s: settled %v, want cost 100 used %d", c.name, got, c.want)
		}
	}
	if len(f.takes) != len(cases) || len(f.settled) != len(cases) {
		t.Errorf("%d takes, %d settles, want %d each", len(f.takes), len(f.settled), len(cases))
	}
}

func TestSharedPanicRefunds(t *testing.T) {
	l, f := newShared(t, ratelimit.Config{})
	func() {
		defer func() { recover() }()
		l.Execute(ratelimit.WithCost(context.Background(), 5), func(context.Context) error { panic("x") })
	}()
	if len(f.settled) != 1 || f.settled[0] != [2]int{5, 0} {
		t.Errorf("settled %v after a panic, want [[5 0]]", f.settled)
	}
}

func TestSharedRejectionEndsTheGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newShared(t, ratelimit.Config{})
		l.HoldFor(time.Second)
		rej := policy.NewRejectedError("quota", "q", ratelimit.ReasonThrottled, ratelimit.ErrLimited)
		f.reject = rej
		time.Sleep(time.Second)
		// The gate lets one through, which the shared quota refuses: the
		// next attempt goes at once rather than waiting for an answer.
		if err := l.Execute(context.Background(), ok); err != rej {
			t.Fatalf("Execute = %v, want the shared rejection", err)
		}
		f.reject = nil
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if err := l.Execute(ctx, ok); err != nil {
			t.Fatalf("after a refused attempt, Execute = %v", err)
		}
		if len(f.settled) != 1 {
			t.Errorf("settled %v: a refused attempt is not settled", f.settled)
		}
	})
}

func TestSharedWaitBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newShared(t, ratelimit.Config{MaxWait: 3 * time.Second, RequestsPerSecond: 1, Burst: 1})
		start := time.Now()
		l.Execute(context.Background(), ok)
		// The second waits 1 s for the local rate; its shared bound is
		// still 3 s from when it entered.
		l.Execute(context.Background(), ok)
		if got := f.bys[1].Sub(start); got != 3*time.Second {
			t.Errorf("bound %v after entry, want 3s", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		l.Execute(ctx, ok)
		dl, _ := ctx.Deadline()
		if got := f.bys[2]; !got.Before(dl) || dl.Sub(got) > time.Microsecond {
			t.Errorf("bound %v, want just before the deadline %v", got, dl)
		}
		// A shared wait past the bound is refused by the shared quota.
		f.wait = 10 * time.Second
		if err := l.Execute(context.Background(), ok); !errors.Is(err, ratelimit.ErrLimited) {
			t.Errorf("Execute = %v, want ErrLimited", err)
		}
	})
}

func TestSharedLocalFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newShared(t, ratelimit.Config{RequestsPerSecond: 1, Burst: 1, MaxWait: 100 * time.Millisecond})
		l.Execute(context.Background(), ok)
		// The local rate refuses the second: the shared quota is not asked.
		if err := l.Execute(context.Background(), ok); !errors.Is(err, ratelimit.ErrLimited) {
			t.Fatalf("Execute = %v, want the local rate's rejection", err)
		}
		if len(f.takes) != 1 {
			t.Errorf("%d takes, want 1: a locally refused attempt costs the shared quota nothing", len(f.takes))
		}
	})
}

func TestSharedHoldIsPassedOn(t *testing.T) {
	l, f := newShared(t, ratelimit.Config{MaxHold: 5 * time.Second})
	l.Execute(context.Background(), func(context.Context) error {
		return &httppolicy.StatusError{StatusCode: 429, RetryAfterDelay: time.Second}
	})
	l.HoldFor(2 * time.Second)
	l.HoldFor(time.Minute) // capped at MaxHold
	l.Observe(ratelimit.Answer{Counted: true, Remaining: 3})
	want := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}
	if len(f.holds) != len(want) {
		t.Fatalf("holds %v, want %v", f.holds, want)
	}
	for i := range want {
		if f.holds[i] != want[i] {
			t.Errorf("holds %v, want %v", f.holds, want)
		}
	}
}

func TestSharedThroughAPipeline(t *testing.T) {
	l, f := newShared(t, ratelimit.Config{})
	p, err := compose.New("shared", compose.Policies{RateLimit: l})
	if err != nil {
		t.Fatal(err)
	}
	if ratelimit.WantsUsage(context.Background()) {
		t.Error("WantsUsage of a bare ctx is true")
	}
	p.Execute(ratelimit.WithCost(context.Background(), 9), func(ctx context.Context) error {
		if !ratelimit.WantsUsage(ctx) {
			t.Error("WantsUsage of an attempt's ctx is false")
		}
		ratelimit.ReportUsage(ctx, 4)
		return nil
	})
	if len(f.settled) != 1 || f.settled[0] != [2]int{9, 4} {
		t.Errorf("settled %v, want [[9 4]]", f.settled)
	}
	ratelimit.ReportUsage(context.Background(), 3) // no attempt: ignored
}

func TestSharedKeptByUpdateRefusedNil(t *testing.T) {
	l, f := newShared(t, ratelimit.Config{})
	if err := l.Update(ratelimit.Config{MaxWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	if l.Config().Shared != ratelimit.Shared(f) {
		t.Errorf("Update dropped Shared")
	}
	_, err := ratelimit.New(ratelimit.Config{Shared: (*fakeShared)(nil)})
	if err == nil || err.Error() != "ratelimit: Config.Shared is a nil *ratelimit_test.fakeShared; leave it nil for no shared quota" {
		t.Errorf("New with a nil *fakeShared = %v", err)
	}
}

// stuckShared is a shared quota whose Take does not answer before ctx
// ends (a round trip to a frozen store, say), and then returns ctx's
// error, as ratelimit.Shared allows.
type stuckShared struct{ fakeShared }

func (s *stuckShared) Take(ctx context.Context, cost int, by time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestSharedWaitEndedByDeadlineIsRejection: a Deadline's timer that ends
// ctx while the attempt waits in the Limiter (its shared quota included)
// ends it as the Limiter's Outcomes table says: rejected, fn never ran,
// not a timeout.
func TestSharedWaitEndedByDeadlineIsRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := ratelimit.New(ratelimit.Config{Shared: &stuckShared{}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		d, err := deadline.New(deadline.Config{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.New("stuck", compose.Policies{Deadline: d, RateLimit: l})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		err = p.Execute(context.Background(), func(context.Context) error { ran = true; return nil })
		if ran {
			t.Fatal("fn ran")
		}
		if errors.Is(err, deadline.ErrExceeded) || !errors.Is(err, policy.ErrRejected) {
			t.Errorf("a wait in the shared quota ended by the Deadline's timer: Execute = %v (a timeout: %v), want a rejection matching ErrLimited",
				err, errors.Is(err, deadline.ErrExceeded))
		}
	})
}
