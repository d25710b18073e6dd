package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
)

// honestBucket is a provider's requests bucket as OpenAI's works: limit L
// a window, refilled continuously, its reset the time until it is full.
type honestBucket struct {
	mu     sync.Mutex
	limit  float64
	window time.Duration
	n      float64
	last   time.Time
}

// answer takes one request from the bucket and has l observe the answer
// (reset overriding its reset if not empty); it reports whether the
// request was allowed (a 200, else a 429).
func (b *honestBucket) answer(l *ratelimit.Limiter, reset string) bool {
	b.mu.Lock()
	now := time.Now()
	b.n = math.Min(b.limit, b.n+b.limit*now.Sub(b.last).Seconds()/b.window.Seconds())
	b.last = now
	allowed := b.n >= 1
	if allowed {
		b.n--
	}
	left := int(b.n)
	if reset == "" {
		reset = time.Duration((b.limit - b.n) / b.limit * float64(b.window)).Round(time.Millisecond).String()
	}
	limit := strconv.Itoa(int(b.limit))
	b.mu.Unlock()
	status := 200
	if !allowed {
		status = 429
	}
	observe(l, resp(status, "x-ratelimit-limit-requests", limit,
		"x-ratelimit-remaining-requests", strconv.Itoa(left), "x-ratelimit-reset-requests", reset))
	return allowed
}

// loadResult counts the calls of a load run by how they ended.
type loadResult struct{ ok, rejected, other, served429 atomic.Int64 }

// runLoad sends rate calls a second for d through l, each with a deadline
// of deadline, whose attempt takes an answer from b (the first one with
// its reset read as firstReset, if not empty) and then stays in fn for
// service (a stream), and returns how they ended.
func runLoad(l *ratelimit.Limiter, b *honestBucket, rate float64, d, deadline, service time.Duration, firstReset string) *loadResult {
	var r loadResult
	var wg sync.WaitGroup
	var first atomic.Bool
	start := time.Now()
	for i := range int(rate * d.Seconds()) {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			err := l.Execute(ctx, func(ctx context.Context) error {
				reset := ""
				if first.CompareAndSwap(false, true) {
					reset = firstReset
				}
				if !b.answer(l, reset) {
					r.served429.Add(1)
					return errors.New("429")
				}
				t := time.NewTimer(service)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				return nil
			})
			switch {
			case err == nil:
				r.ok.Add(1)
			case errors.Is(err, policy.ErrRejected):
				r.rejected.Add(1)
			default:
				r.other.Add(1)
			}
		})
	}
	wg.Wait()
	return &r
}

// Streams stay in fn long after their answer: the gate must not wait for them
// to end to let more through. The quota refills 10 a second (60 per 6 s);
// after a hold, 8 calls a second, or 15 (more than the quota), each stream in
// fn for up to 10 s. The gate lets one more through every refill interval
// (100 ms) whatever is out, so at 8/s the calls go as an ungated limiter's
// would, and at 15/s as many as the quota allows, with no 429.
func TestGateReleasesStreamsAtTheRefillPace(t *testing.T) {
	for _, c := range []struct {
		rate    float64
		service time.Duration
		minOK   int64
	}{
		{8, 100 * time.Millisecond, 235},
		{8, 3 * time.Second, 235},
		{8, 10 * time.Second, 235},
		{15, 10 * time.Second, 330}, // 450 calls, the quota about 360 in 36 s
	} {
		t.Run(fmt.Sprintf("%v/s %v", c.rate, c.service), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, ratelimit.Config{})
				b := &honestBucket{limit: 60, window: 6 * time.Second, last: time.Now()}
				observe(l, resp(429, "Retry-After", "1"))
				r := runLoad(l, b, c.rate, 30*time.Second, 8*time.Second, c.service, "")
				t.Logf("ok %d, rejected %d, other %d; the server answered %d with 429", r.ok.Load(), r.rejected.Load(), r.other.Load(), r.served429.Load())
				if r.ok.Load() < c.minOK || r.other.Load() != 0 {
					t.Errorf("%d calls ok (%d rejected, %d other errors), want at least %d", r.ok.Load(), r.rejected.Load(), r.other.Load(), c.minOK)
				}
				if r.served429.Load() > 5 {
					t.Errorf("the server answered %d attempts with 429: the timed release runs ahead of the refill", r.served429.Load())
				}
			})
		})
	}
}

// The timed release follows the refill an answer names: after a probe
// whose answer says 1 of 60 left, full in 5.9 s (a request every 100 ms),
// one more goes at once, then one every 100 ms, though nothing let
// through has ended.
func TestGateReleasesAtTheRefillPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		release := make(chan struct{})
		in, errs := gateCalls(l, 6, func(i int) {
			if i == 1 {
				observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "5.9s"))
			}
		}, release)
		time.Sleep(100 * time.Millisecond) // the hold: 6 s / 60
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Fatalf("%d attempts in fn after the probe's answer, want 2", got)
		}
		for want := int32(3); want <= 6; want++ {
			time.Sleep(99 * time.Millisecond)
			synctest.Wait()
			if got := in.Load(); got != want-1 {
				t.Errorf("%d attempts in fn 1 ms before a refill interval, want %d", got, want-1)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if got := in.Load(); got != want {
				t.Errorf("%d attempts in fn after a refill interval, want %d", got, want)
			}
		}
		close(release)
		for range 6 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// One attempt that hangs after a hold (no answer ever comes) does not shut
// the gate: while no answer has named a count, one more goes every hold's
// length, and the answers of those let the rest through.
func TestGateNotShutByAHungProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		observe(l, resp(429, "Retry-After", "1"))
		hang := make(chan struct{})
		hung := make(chan error, 1)
		go func() { hung <- l.Execute(context.Background(), func(context.Context) error { <-hang; return nil }) }()
		time.Sleep(2 * time.Second)
		var ok, rejected atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			time.Sleep(200 * time.Millisecond)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := l.Execute(ctx, func(context.Context) error {
					observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "100ms"))
					return nil
				})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, policy.ErrRejected):
					rejected.Add(1)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 50 {
			t.Errorf("%d of 50 calls ok (%d rejected) with one hung attempt and quota left, want 50", ok.Load(), rejected.Load())
		}
		close(hang)
		if err := <-hung; err != nil {
			t.Error(err)
		}
	})
}

// Behind a hung attempt, a waiter under a retry is let through by the
// timed release (here after 1 ms, the hold's length), instead of being
// rejected a nanosecond before its deadline with no time left for a
// fallback.
func TestGateHungProbeUnderARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratelimit.Config{})
		p, _ := pipeline(t, lim, 10*time.Second)
		lim.HoldFor(time.Millisecond)
		time.Sleep(2 * time.Millisecond)
		hang := make(chan struct{})
		hung := make(chan error, 1)
		go func() { hung <- lim.Execute(context.Background(), func(context.Context) error { <-hang; return nil }) }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		ran := false
		err := p.Execute(ctx, func(context.Context) error { ran = true; return nil })
		if err != nil || !ran {
			t.Errorf("err = %v, ran %v: want the call run", err, ran)
		}
		if d := time.Since(start); d > 2*time.Millisecond {
			t.Errorf("ran after %v, want within the hold's length of the probe", d)
		}
		close(hang)
		if err := <-hung; err != nil {
			t.Error(err)
		}
	})
}

// Once answers name counts, the timed release paces the refill: a waiter
// whose deadline comes before the next release is rejected at once, with
// the rest of its deadline for a fallback, as one whose hold outlasts it
// is; one whose deadline allows goes at the release.
func TestGateRejectsAtOnceWhenTheReleaseIsTooLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, ratelimit.Config{})
		start := time.Now()
		observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "6s"))
		release := make(chan struct{})
		// The probe, at 100 ms: 1 left, full in 59 s (a request a second):
		// one more goes; both hang.
		in, errs := gateCalls(l, 2, func(i int) {
			if i == 1 {
				observe(l, resp(200, "x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "1", "x-ratelimit-reset-requests", "59s"))
			}
		}, release)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := in.Load(); got != 2 {
			t.Fatalf("%d attempts in fn, want 2", got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		at := time.Now()
		err := l.Execute(ctx, func(context.Context) error { t.Error("ran behind the gate"); return nil })
		checkRejection(t, err, ratelimit.ReasonThrottled)
		if d := time.Since(at); d != 0 {
			t.Errorf("rejected after %v, want at once (the release is 1 s away, the deadline 500 ms)", d)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		if err := l.Execute(ctx2, ok); err != nil {
			t.Errorf("err = %v, want the attempt let through by the timed release", err)
		}
		if d := time.Since(start); d != 1100*time.Millisecond {
			t.Errorf("let through at %v, want 1.1 s (the probe's answer, then a refill interval)", d)
		}
		close(release)
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}
