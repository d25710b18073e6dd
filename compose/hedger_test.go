package compose_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/internal/telemetry"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
)

// errTwinLost is the cause with which twin cancels its losing attempt.
var errTwinLost = errors.New("twin: lost")

// twin is a concurrent-attempt policy of this module's kind that is not a
// retry.Hedge: it starts two attempts at once and the first success wins,
// the other being canceled with errTwinLost. It implements stage.Hedger,
// so compose runs each attempt through the slots below it.
type twin struct{ wg sync.WaitGroup }

var _ stage.Hedger = (*twin)(nil)

type twinCall struct{ winner atomic.Int32 }

type twinClaim struct {
	call *twinCall
	n    int32
}

func (c twinClaim) Claim() bool {
	return c.call.winner.CompareAndSwap(0, c.n) || c.call.winner.Load() == c.n
}

func (h *twin) Execute(ctx context.Context, fn policy.Func) error {
	return h.Hedge(ctx, func(ctx context.Context, _ int) error { return fn(ctx) })
}

func (h *twin) Hedge(ctx context.Context, attempt stage.AttemptFunc) error {
	ctx, cancel := context.WithCancelCause(ctx)
	call := new(twinCall)
	results := make(chan error, 2)
	for n := int32(1); n <= 2; n++ {
		claim := twinClaim{call, n}
		actx := policy.WithClaimer(ctx, claim)
		h.wg.Go(func() {
			err := attempt(actx, int(n))
			if err == nil && !claim.Claim() {
				err = context.Canceled
			}
			results <- err
		})
	}
	var err error
	for range 2 {
		if err = <-results; err == nil {
			break
		}
	}
	cancel(errTwinLost) // the loser, if still running
	return err
}

func (h *twin) Lost(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errTwinLost) }

// seen is a plain policy below the hedge that records the outcome of each
// attempt it runs.
type seen struct {
	mu   sync.Mutex
	errs []error
}

func (s *seen) Execute(ctx context.Context, fn policy.Func) error {
	err := fn(ctx)
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	return err
}

// Another concurrent-attempt policy than retry.Hedge plugs into the Retry
// slot through stage.Hedger: compose runs each attempt through the slots
// below with an attempt span carrying the number the hedger gave, reports
// the loser's error to them as a cancellation (as its Lost says), and
// policy.Do returns the winner's value.
func TestHedgerPlugsIn(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer tp.Shutdown(context.Background())
	h := new(twin)
	below := new(seen)
	p, err := compose.New("twin", compose.Policies{Retry: h, Breaker: below}, compose.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if !p.ConcurrentAttempts() {
		t.Error("ConcurrentAttempts = false with a hedger in the Retry slot")
	}
	var first atomic.Bool
	loserErr := errors.New("driver: i/o timeout") // says nothing about the dependency
	v, err := policy.Do(context.Background(), p, func(ctx context.Context) (string, error) {
		if first.CompareAndSwap(false, true) {
			return "winner", nil
		}
		<-ctx.Done()
		return "", loserErr
	})
	h.wg.Wait()
	if v != "winner" || err != nil {
		t.Fatalf("Do = %q, %v; want the winner's value", v, err)
	}
	below.mu.Lock()
	defer below.mu.Unlock()
	var nils, canceled int
	for _, e := range below.errs {
		switch {
		case e == nil:
			nils++
		case errors.Is(e, context.Canceled) && errors.Is(e, loserErr):
			canceled++
		}
	}
	if nils != 1 || canceled != 1 {
		t.Errorf("the slot below saw %v; want one success and the loser's error as context.Canceled", below.errs)
	}
	var attempts []int
	for _, s := range sr.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == telemetry.KeyAttempt {
				attempts = append(attempts, int(kv.Value.AsInt64()))
			}
		}
	}
	slices.Sort(attempts)
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Errorf("attempt spans numbered %v, want [1 2]", attempts)
	}
}

// serialPolicy runs fn once and says so.
type serialPolicy struct{}

func (serialPolicy) Execute(ctx context.Context, fn policy.Func) error { return fn(ctx) }
func (serialPolicy) ConcurrentAttempts() bool                          { return false }

// ConcurrentAttempts is true when a slot hedges, or holds a policy of
// another package that does not say it never does; a pipeline of this
// module's policies, or of policies that say so, is not.
func TestConcurrentAttempts(t *testing.T) {
	r, err := retry.New(retry.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := retry.NewHedge(retry.HedgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    compose.Policies
		want bool
	}{
		{"empty", compose.Policies{}, false},
		{"stages and a retry", compose.Policies{Bulkhead: &fakeStage{name: "b"}, Retry: r, Breaker: &fakeStage{name: "c"}}, false},
		{"retry.Hedge", compose.Policies{Retry: h, Breaker: &fakeStage{name: "c"}}, true},
		{"another hedger", compose.Policies{Retry: new(twin)}, true},
		{"a plain policy", compose.Policies{Retry: r, Attempt: &wrapPolicy{name: "w", j: new(journal)}}, true},
		{"a plain policy that says so", compose.Policies{Retry: r, Attempt: serialPolicy{}}, false},
		{"a serial pipeline inside", compose.Policies{Retry: mustPipeline(t, compose.Policies{Retry: r})}, false},
		{"a hedged pipeline inside", compose.Policies{Bulkhead: mustPipeline(t, compose.Policies{Retry: h})}, true},
	} {
		if got := mustPipeline(t, tc.p).ConcurrentAttempts(); got != tc.want {
			t.Errorf("%s: ConcurrentAttempts = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func mustPipeline(t *testing.T, p compose.Policies) *compose.Pipeline {
	t.Helper()
	pl, err := compose.New("p", p)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}
