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
		outerCtx, outer := stage.Begin(context.Background(), count)
		ctx, a := stage.Begin(outerCtx, count)
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
		_, b := stage.Begin(context.Background(), count)
		time.Sleep(time.Second)
		if d := b.End(time.Now()); d != time.Second || n != 0 {
			t.Fatalf("unanswered End = %v, count %d; want 1s, 0", d, n)
		}
	})
}

// Each layer's record copies the enclosing one: a hedged attempt inside a
// retry's attempt 2 keeps the retry's number and call, and a sample below
// them keeps both.
func TestAttemptRecordInherits(t *testing.T) {
	call := context.Background()
	ctx := stage.WithHedge(stage.WithRetry(call, 2), 3)
	ctx, _ = stage.Begin(ctx, nil)
	a := stage.Of(ctx)
	if a == nil || a.Retry != 2 || a.Hedge != 3 || a.Call != call {
		t.Fatalf("record %+v; want retry 2, hedge 3, the retry's call", a)
	}
	if inner := stage.Of(stage.WithRetry(ctx, 1)); inner.Retry != 1 || inner.Hedge != 3 || inner.Call != ctx {
		t.Fatalf("inner record %+v; want retry 1 of the inner call, hedge 3", inner)
	}
	if stage.Of(call) != nil {
		t.Fatal("a record in a context that has none")
	}
}
