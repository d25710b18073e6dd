package main

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/policy"
)

// The tests talk to real local servers over loopback, so they wait for
// real: the waits are short (100-300ms) and the bounds on them generous.
// goleak checks that every server, connection and exchange goroutine is
// gone at the end: each test closes its guards' idle connections and shuts
// its fakes down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var apis = []API{OpenAIAPI, AnthropicAPI}

// testLimits: 2 slots and no queue, a 5s call budget, quick backoff, and a
// breaker that opens on the 3rd failure for 200ms.
func testLimits() Limits {
	return Limits{
		Slots: 2, Queue: 0,
		CallTimeout: 5 * time.Second, AttemptTimeout: 4 * time.Second,
		Attempts: 3, Backoff: 10 * time.Millisecond, MaxWait: 2 * time.Second,
		TripAfter: 3, OpenFor: 200 * time.Millisecond,
	}
}

// newTestPair starts a fake for api and a guarded client for it, both
// closed when the test ends.
func newTestPair(t *testing.T, api API, cfg FakeConfig, l Limits) pair {
	t.Helper()
	p, err := newPair(api, cfg, l)
	if err != nil {
		t.Fatalf("newPair(%s): %v", api, err)
	}
	t.Cleanup(p.close)
	return p
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func wantText(api API) string { return "Hello from the fake " + api.String() + "." }

func TestCompleteAndStream(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			p := newTestPair(t, api, FakeConfig{}, testLimits())
			ctx := context.Background()
			got, err := p.chat.Complete(ctx, "hi")
			if err != nil || got != wantText(api) {
				t.Fatalf("Complete = %q, %v; want %q", got, err, wantText(api))
			}
			var deltas []string
			got, err = p.chat.Stream(ctx, "hi", func(d string) { deltas = append(deltas, d) })
			if err != nil || got != wantText(api) {
				t.Fatalf("Stream = %q, %v; want %q", got, err, wantText(api))
			}
			if len(deltas) != 5 {
				t.Errorf("got %d deltas %q, want 5", len(deltas), deltas)
			}
			if n := p.fake.Requests(); n != 2 {
				t.Errorf("fake saw %d requests, want 2", n)
			}
			if a := p.chat.Guard().Pipeline.Bulkhead().Active(); a != 0 {
				t.Errorf("Active() = %d after the calls, want 0", a)
			}
		})
	}
}

func TestSlowProviderFillsOnlyItsOwnBulkhead(t *testing.T) {
	for _, slowAPI := range apis {
		t.Run("slow "+slowAPI.String(), func(t *testing.T) {
			slow := newTestPair(t, slowAPI, FakeConfig{Delay: 300 * time.Millisecond}, testLimits())
			fast := newTestPair(t, other(slowAPI), FakeConfig{}, testLimits())
			slow.fake.SetMode(Slow)
			ctx := context.Background()

			const calls = 6
			errs := make([]error, calls)
			var wg sync.WaitGroup
			for i := range calls {
				wg.Go(func() { _, errs[i] = slow.chat.Complete(ctx, "hi") })
			}
			bh := slow.chat.Guard().Pipeline.Bulkhead()
			waitFor(t, "the slow provider's bulkhead to fill", func() bool { return bh.Active() == bh.Limit() })

			// The other provider answers while the slow one's bulkhead is full.
			for range 3 {
				if got, err := fast.chat.Complete(ctx, "hi"); err != nil || got != wantText(fast.fake.API) {
					t.Errorf("other provider: Complete = %q, %v", got, err)
				}
			}
			if a := bh.Active(); a != bh.Limit() {
				t.Errorf("slow bulkhead Active() = %d once the other provider's calls were done, want %d (still full)", a, bh.Limit())
			}
			wg.Wait()

			var ok, full int
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case errors.Is(err, bulkhead.ErrFull) && errors.Is(err, policy.ErrRejected):
					full++
				default:
					t.Errorf("unexpected error: %v", err)
				}
			}
			if ok != 2 || full != calls-2 {
				t.Errorf("slow provider: %d ok and %d rejected as full, want 2 and %d", ok, full, calls-2)
			}
			if n := slow.fake.Requests(); n != 2 {
				t.Errorf("slow fake saw %d requests, want 2: rejected calls must not reach it", n)
			}
			if a := bh.Active(); a != 0 {
				t.Errorf("slow bulkhead Active() = %d at the end, want 0", a)
			}
			if s := slow.chat.Guard().Pipeline.Breaker().State(); s != breaker.Closed {
				t.Errorf("slow provider's breaker is %v: rejections must not count as failures", s)
			}
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	const asked = 100 * time.Millisecond
	for _, tc := range []struct {
		api    API
		stream bool
	}{{OpenAIAPI, false}, {OpenAIAPI, true}, {AnthropicAPI, false}, {AnthropicAPI, true}} {
		api, name := tc.api, tc.api.String()+"/complete"
		if tc.stream {
			name = tc.api.String() + "/stream"
		}
		t.Run(name, func(t *testing.T) {
			l := testLimits() // Backoff 10ms: without Retry-After the wait would be 5-15ms
			var mu sync.Mutex
			var waits []time.Duration
			l.OnRetry = func(_ int, err error, wait time.Duration) {
				mu.Lock()
				waits = append(waits, wait)
				mu.Unlock()
			}
			p := newTestPair(t, api, FakeConfig{RetryAfter: asked}, l)
			p.fake.Script(TooMany, OK)

			call := p.chat.Complete
			if tc.stream {
				call = func(ctx context.Context, prompt string) (string, error) { return p.chat.Stream(ctx, prompt, nil) }
			}
			got, err := call(context.Background(), "hi")
			if err != nil || got != wantText(api) {
				t.Fatalf("got %q, %v; want the answer of the second try", got, err)
			}
			mu.Lock()
			defer mu.Unlock()
			// No double wait: the RateLimit section takes the Retry-After
			// into its hold and the retry waits only its own backoff; the
			// hold then keeps the second attempt until the time asked.
			if len(waits) != 1 || waits[0] >= asked {
				t.Errorf("retry waits = %v, want one wait shorter than the %v asked (the hold waits)", waits, asked)
			}
			at := p.fake.Arrivals()
			if len(at) != 2 {
				t.Fatalf("fake saw %d requests, want 2", len(at))
			}
			if gap := at[1].Sub(at[0]); gap < asked {
				t.Errorf("second try came %v after the first, before the %v asked", gap, asked)
			}
		})
	}
}

// A Retry-After longer than MaxWait is not slept through: the hold it sets
// rejects the retry at once, nothing more is sent, and the call ends with
// the 429 itself.
func TestRetryAfterBeyondMaxWaitGivesUp(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			p := newTestPair(t, api, FakeConfig{RetryAfter: 30 * time.Second}, l)
			p.fake.SetMode(TooMany)
			start := time.Now()
			_, err := p.chat.Complete(context.Background(), "hi")
			if code := statusCode(err); code != http.StatusTooManyRequests {
				t.Fatalf("err = %v, want the provider's 429", err)
			}
			if n := p.fake.Requests(); n != 1 {
				t.Errorf("fake saw %d requests, want 1: the hold turns the retry away", n)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v: the 30s wait must not be slept", d)
			}
		})
	}
}

// With the SDK's retries off, MaxAttempts is the number of requests: 3, not
// 3 x 3.
func TestAttemptsDoNotMultiply(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			p := newTestPair(t, api, FakeConfig{RetryAfter: 10 * time.Millisecond}, testLimits())
			p.fake.SetMode(TooMany)
			_, err := p.chat.Complete(context.Background(), "hi")
			if code := statusCode(err); code != http.StatusTooManyRequests {
				t.Fatalf("err = %v, want the last 429", err)
			}
			if n := p.fake.Requests(); n != 3 {
				t.Errorf("fake saw %d requests, want 3 (MaxAttempts)", n)
			}
		})
	}
}

func TestBreakerOpensAndCloses(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			// One attempt per call: with its Idempotency-Key, a POST
			// answered 500 would be retried.
			l.Attempts = 1
			var mu sync.Mutex
			var changes []string
			l.OnState = func(from, to breaker.State) {
				mu.Lock()
				changes = append(changes, from.String()+">"+to.String())
				mu.Unlock()
			}
			p := newTestPair(t, api, FakeConfig{}, l)
			healthy := newTestPair(t, other(api), FakeConfig{}, testLimits())
			br := p.chat.Guard().Pipeline.Breaker()
			ctx := context.Background()

			p.fake.SetMode(Fail)
			for i := range 3 {
				if _, err := p.chat.Complete(ctx, "hi"); statusCode(err) != http.StatusInternalServerError {
					t.Fatalf("call %d: err = %v, want the provider's 500", i+1, err)
				}
			}
			if s := br.State(); s != breaker.Open {
				t.Fatalf("breaker %v after 3 failures, want open", s)
			}
			_, err := p.chat.Complete(ctx, "hi")
			if !errors.Is(err, breaker.ErrOpen) || !errors.Is(err, policy.ErrRejected) {
				t.Fatalf("call 4: err = %v, want the open breaker's rejection", err)
			}
			if n := p.fake.Requests(); n != 3 {
				t.Errorf("fake saw %d requests, want 3: an open breaker sends nothing", n)
			}
			// The other provider is not affected.
			if _, err := healthy.chat.Complete(ctx, "hi"); err != nil {
				t.Errorf("other provider: %v", err)
			}
			if s := healthy.chat.Guard().Pipeline.Breaker().State(); s != breaker.Closed {
				t.Errorf("other provider's breaker %v, want closed", s)
			}

			// Recovery: after OpenFor one probe goes through and closes it.
			p.fake.SetMode(OK)
			waitFor(t, "half-open", func() bool { return br.State() == breaker.HalfOpen })
			if got, err := p.chat.Complete(ctx, "hi"); err != nil || got != wantText(api) {
				t.Fatalf("probe: %q, %v", got, err)
			}
			if s := br.State(); s != breaker.Closed {
				t.Errorf("breaker %v after a good probe, want closed", s)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"closed>open", "open>half-open", "half-open>closed"}; !slices.Equal(changes, want) {
				t.Errorf("transitions %v, want %v", changes, want)
			}
		})
	}
}

func TestStreamHoldsItsSlotUntilItEnds(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			l.Slots = 1
			p := newTestPair(t, api, FakeConfig{ChunkGap: 20 * time.Millisecond}, l)
			bh := p.chat.Guard().Pipeline.Bulkhead()
			ctx := context.Background()

			var during []int
			var second error
			got, err := p.chat.Stream(ctx, "hi", func(string) {
				during = append(during, bh.Active())
				if len(during) == 1 {
					// The slot is really taken: another call is turned away.
					_, second = p.chat.Complete(ctx, "hi")
				}
			})
			if err != nil || got != wantText(api) {
				t.Fatalf("Stream = %q, %v", got, err)
			}
			if !slices.Equal(during, []int{1, 1, 1, 1, 1}) {
				t.Errorf("Active() at each delta = %v, want 1 throughout", during)
			}
			if !errors.Is(second, bulkhead.ErrFull) {
				t.Errorf("a call made while streaming: err = %v, want bulkhead.ErrFull", second)
			}
			// Stream returns after the stream is closed: the slot is free.
			if a := bh.Active(); a != 0 {
				t.Errorf("Active() = %d after the stream, want 0", a)
			}
			if _, err := p.chat.Complete(ctx, "hi"); err != nil {
				t.Errorf("a call after the stream: %v", err)
			}
		})
	}
}

func TestHungProviderIsCut(t *testing.T) {
	for _, api := range apis {
		t.Run(api.String(), func(t *testing.T) {
			l := testLimits()
			l.AttemptTimeout, l.CallTimeout = 300*time.Millisecond, 3*time.Second
			p := newTestPair(t, api, FakeConfig{}, l)
			p.fake.SetMode(Hang)
			start := time.Now()
			_, err := p.chat.Complete(context.Background(), "hi")
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want a timeout", err)
			}
			// The attempt deadline's error survives the retries.
			if !errors.Is(err, deadline.ErrExceeded) {
				t.Errorf("err %q does not match deadline.ErrExceeded", err)
			}
			if took < 900*time.Millisecond || took > 2900*time.Millisecond {
				t.Errorf("took %v, want about 3 x the 300ms attempt timeout", took)
			}
			// Each call carries an Idempotency-Key, so the POST that timed
			// out is retried: 3 attempts.
			if n := p.fake.Requests(); n != 3 {
				t.Errorf("fake saw %d requests, want 3 (MaxAttempts)", n)
			}
			if a := p.chat.Guard().Pipeline.Bulkhead().Active(); a != 0 {
				t.Errorf("Active() = %d after the call, want 0", a)
			}
		})
	}
}
