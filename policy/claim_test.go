package policy_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// race is a minimal hedging policy: it starts n attempts at once, each in
// a goroutine with a context carrying its Claimer, returns as soon as the
// attempt that claimed succeeds (canceling the others, without waiting for
// them), or the last error once all have failed.
type race struct {
	n    int
	wg   *sync.WaitGroup // the attempts' goroutines, for the test to wait on
	lose func(i int) error
}

type raceCall struct{ winner atomic.Int32 } // 0: none, else attempt + 1

type raceClaim struct {
	call *raceCall
	id   int32
}

func (c raceClaim) Claim() bool {
	return c.call.winner.CompareAndSwap(0, c.id) || c.call.winner.Load() == c.id
}

func (r race) Execute(ctx context.Context, fn policy.Func) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	call := new(raceCall)
	results := make(chan error, r.n)
	for i := range r.n {
		claim := raceClaim{call, int32(i + 1)}
		actx := policy.WithClaimer(ctx, claim)
		r.wg.Go(func() {
			err := fn(actx)
			if err == nil && r.lose != nil {
				err = r.lose(i) // a policy below the hedge turns a success into a failure
			}
			if err == nil && !claim.Claim() {
				err = context.Canceled // a success that lost
			}
			if err != nil {
				call.winner.CompareAndSwap(claim.id, 0) // give the claim back
			}
			results <- err
		})
	}
	var last error
	for range r.n {
		if last = <-results; last == nil {
			return nil
		}
	}
	return last
}

// Do publishes only the winner's value: the losers succeed too, one before
// the winner returns and the others after Do has returned, and none of
// their values is seen (run under -race: no write after Do's read).
func TestDoPublishesOnlyTheWinner(t *testing.T) {
	for range 200 {
		var wg sync.WaitGroup
		release := make(chan struct{})
		var first atomic.Int32
		v, err := policy.Do(context.Background(), race{n: 3, wg: &wg}, func(ctx context.Context) (int, error) {
			if first.CompareAndSwap(0, 1) {
				return 1, nil // the winner
			}
			<-release // the losers finish after Do has returned
			return 99, nil
		})
		close(release)
		wg.Wait()
		if err != nil || v != 1 {
			t.Fatalf("Do = %v, %v; want the winner's 1", v, err)
		}
	}
}

// Concurrent successes race for the claim: Do returns one of them, whole,
// and the call's error is nil.
func TestDoConcurrentWinners(t *testing.T) {
	for range 200 {
		var wg sync.WaitGroup
		var n atomic.Int32
		v, err := policy.Do(context.Background(), race{n: 4, wg: &wg}, func(ctx context.Context) ([2]int, error) {
			i := int(n.Add(1))
			return [2]int{i, i}, nil
		})
		wg.Wait()
		if err != nil || v[0] == 0 || v[0] != v[1] {
			t.Fatalf("Do = %v, %v; want one attempt's whole value", v, err)
		}
	}
}

// A winner whose success a policy below the hedge turned into a failure
// gives the claim back: the call fails and Do returns the zero value.
func TestDoClaimGivenBack(t *testing.T) {
	boom := errors.New("boom")
	var wg sync.WaitGroup
	v, err := policy.Do(context.Background(), race{n: 1, wg: &wg, lose: func(int) error { return boom }}, func(ctx context.Context) (string, error) {
		return "claimed, then failed", nil
	})
	wg.Wait()
	if !errors.Is(err, boom) || v != "" {
		t.Errorf("Do = %q, %v; want the zero value and boom", v, err)
	}
}

// Without a Claimer in ctx, Claim is true: attempts one at a time each
// publish in turn.
func TestClaimWithoutClaimer(t *testing.T) {
	if !policy.Claim(context.Background()) {
		t.Error("Claim = false without a Claimer")
	}
	ctx := policy.WithClaimer(context.Background(), raceClaim{new(raceCall), 1})
	if !policy.Claim(ctx) || !policy.Claim(ctx) {
		t.Error("Claim = false for the only attempt, or not again")
	}
}

// A Do nested in a hedged attempt's fn (a call to another dependency,
// through a policy that runs it once) does not take the attempt's claim:
// attempt 1's inner Do succeeds, then attempt 1 fails after attempt 2 has
// succeeded; the call returns attempt 2's value.
func TestNestedDoTakesNoClaim(t *testing.T) {
	h, err := retry.NewHedge(retry.HedgeConfig{MaxHedges: 1, Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("outer failed after inner Do")
	secondDone := make(chan struct{})
	var n atomic.Int32
	v, err := policy.Do(context.Background(), h, func(ctx context.Context) (int, error) {
		if n.Add(1) == 1 {
			policy.Do(ctx, direct{}, func(context.Context) (int, error) { return 7, nil })
			select {
			case <-secondDone:
			case <-time.After(2 * time.Second):
			}
			return 0, boom
		}
		defer close(secondDone)
		return 2, nil
	})
	if err != nil || v != 2 {
		t.Fatalf("Do = %v, %v; want attempt 2's 2, nil", v, err)
	}
}

// direct is a policy that runs fn once, as most do: it sets no Claimer.
type direct struct{}

func (direct) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }

// countingClaimer counts the Claims it is asked, and refuses them all.
type countingClaimer struct{ asked atomic.Int32 }

func (c *countingClaimer) Claim() bool { c.asked.Add(1); return false }

// serial is a policy that runs fn once and says so (policy.Concurrent).
type serial struct{ direct }

func (serial) ConcurrentAttempts() bool { return false }

// concurrentDirect runs fn once but says it may hedge.
type concurrentDirect struct{ direct }

func (concurrentDirect) ConcurrentAttempts() bool { return true }

// Do with a policy that says it runs attempts one at a time looks for no
// claim: a Claimer in ctx (a hedge further out, say) is not asked, and the
// value is published. With a policy that does not say so, or says it may
// hedge, Do asks the Claimer, which refuses here: nothing is published.
func TestDoSerialPolicyTakesNoClaim(t *testing.T) {
	for _, tc := range []struct {
		name      string
		p         policy.Policy
		wantAsked bool
	}{
		{"serial", serial{}, false},
		{"unknown", direct{}, true},
		{"concurrent", concurrentDirect{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := new(countingClaimer)
			ctx := policy.WithClaimer(context.Background(), c)
			v, err := policy.Do(ctx, tc.p, func(context.Context) (int, error) { return 7, nil })
			asked := c.asked.Load() > 0
			want := 7
			if tc.wantAsked {
				want = 0
			}
			if asked != tc.wantAsked || v != want || err != nil {
				t.Errorf("Claimer asked: %v, Do = %v, %v; want asked %v, %v, nil", asked, v, err, tc.wantAsked, want)
			}
		})
	}
}

// A Retry says it runs attempts one at a time, a Hedge that it may run
// them concurrently.
func TestRetryAndHedgeConcurrentAttempts(t *testing.T) {
	r, err := retry.New(retry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := retry.NewHedge(retry.HedgeConfig{Delay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.ConcurrentAttempts() || !h.ConcurrentAttempts() {
		t.Errorf("Retry: %v, Hedge: %v; want false, true", r.ConcurrentAttempts(), h.ConcurrentAttempts())
	}
}
