package compose_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/retry"
)

type suspendingAttempt struct{}

func (suspendingAttempt) Attempt(context.Context) error { return stage.ErrSuspend }

// A pipeline with a retry in every slot but the Bulkhead's (an adaptive
// limit, which samples each attempt) and tracing on needs more frames than
// a suspension holds: it must not be offered as a Suspender (found by
// review: the suspension's frames overflowed after fn had suspended, and
// httppolicy's RoundTrip hung). The usual five-slot pipeline with one
// retry still suspends.
func TestSuspensionDepth(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	newRetry := func() *retry.Retry {
		r, err := retry.New(retry.Config{MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	lim, err := adaptive.New(adaptive.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	deep, err := compose.New("deep", compose.Policies{
		Bulkhead: lim, Deadline: newRetry(), Retry: newRetry(), RateLimit: newRetry(), Breaker: newRetry(), Attempt: newRetry(),
	}, compose.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if s := stage.SuspenderOf(deep); s != nil {
		// Before the fix this panicked with an index out of range.
		sp, err := s.ExecuteSuspendable(context.Background(), suspendingAttempt{})
		if err != nil || sp == nil {
			t.Fatalf("ExecuteSuspendable = %v, %v", sp, err)
		}
		sp.Resume(nil)
		t.Error("a pipeline needing 18 frames is offered as a Suspender")
	}
	if err := deep.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}

	bh, err := bulkhead.New(bulkhead.Config{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	dl, err := deadline.New(deadline.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	at, err := deadline.New(deadline.Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lim2, err := adaptive.New(adaptive.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim2.Close()
	for _, ps := range []compose.Policies{
		{Bulkhead: bh, Deadline: dl, Retry: newRetry(), Attempt: at},
		{Bulkhead: lim2, Deadline: dl, Retry: newRetry(), Attempt: at},
	} {
		usual, err := compose.New("usual", ps, compose.WithTracerProvider(tp))
		if err != nil {
			t.Fatal(err)
		}
		s := stage.SuspenderOf(usual)
		if s == nil {
			t.Fatalf("the usual pipeline %+v cannot suspend", ps)
		}
		sp, err := s.ExecuteSuspendable(context.Background(), suspendingAttempt{})
		if err != nil || sp == nil {
			t.Fatalf("ExecuteSuspendable = %v, %v", sp, err)
		}
		if err := sp.Resume(nil); err != nil {
			t.Fatalf("Resume = %v", err)
		}
	}
}
