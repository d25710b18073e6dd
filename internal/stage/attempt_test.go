package stage_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/internal/stage"
)

// An attempt's latency ends at its first answer, which counts once, and
// an answer marked after its end (a hedge's late loser) counts nothing.
func TestAttemptCountsItsAnswerOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		count := func(d int) { n += d }
		outerCtx, outer := stage.Begin(context.Background(), count, false)
		ctx, a := stage.Begin(outerCtx, count, false)
		time.Sleep(20 * time.Millisecond)
		stage.Answered(ctx)
		stage.Answered(ctx)
		if n != 2 {
			t.Fatalf("count %d after the answer; want 2 (the attempt and the enclosing one)", n)
		}
		time.Sleep(time.Second)
		if d := a.End(time.Now()); d != 20*time.Millisecond || n != 1 {
			t.Fatalf("End = %v, count %d; want 20ms, 1", d, n)
		}
		stage.Answered(ctx) // late: the attempt has ended
		if d := outer.End(time.Now()); d != 20*time.Millisecond || n != 0 {
			t.Fatalf("outer End = %v, count %d; want 20ms, 0", d, n)
		}
		stage.Answered(ctx)
		if n != 0 {
			t.Fatalf("count %d after late answers; want 0", n)
		}
		_, b := stage.Begin(context.Background(), count, false)
		time.Sleep(time.Second)
		if d := b.End(time.Now()); d != time.Second || n != 0 {
			t.Fatalf("unanswered End = %v, count %d; want 1s, 0", d, n)
		}
	})
}

// Each reader finds its part of the record through the layers inside it:
// a sample inside a hedged attempt inside a retry's attempt 2 reads the
// retry's number and call and the hedge's number, and an inner retry's
// attempt hides the outer one.
func TestAttemptRecordLayers(t *testing.T) {
	call := context.Background()
	ctx := stage.WithHedge(stage.WithRetry(call, 2), 3, nil)
	ctx, _ = stage.Begin(ctx, nil, false)
	if n, c := stage.Retry(ctx); n != 2 || c != call || stage.Hedge(ctx) != 3 {
		t.Fatalf("retry %d (call %v), hedge %d; want 2, the retry's call, 3", n, c, stage.Hedge(ctx))
	}
	inner := stage.WithRetry(ctx, 1)
	if n, c := stage.Retry(inner); n != 1 || c != ctx || stage.Hedge(inner) != 3 {
		t.Fatalf("inner retry %d, hedge %d; want 1 of the inner call, 3", n, stage.Hedge(inner))
	}
	if n, c := stage.Retry(call); n != 0 || c != nil || stage.Hedge(call) != 0 {
		t.Fatal("a record in a context that has none")
	}
}
