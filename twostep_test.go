package watertight_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/ratelimit"
)

// One rule for every two-step form: the second end of the same permit
// does nothing. It frees no slot another call holds, counts no outcome
// twice, and records no second timeout.
func TestSecondEndDoesNothing(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")

	bh, err := bulkhead.New(bulkhead.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	other, _ := bh.Acquire(ctx)
	p, _ := bh.Acquire(ctx)
	p.Release()
	p.Release()
	if got := bh.Active(); got != 1 {
		t.Errorf("bulkhead: %d slots held after a second Release; want 1, the other call's", got)
	}
	other.Release()

	al, err := adaptive.New(adaptive.Config{InitialLimit: 2, MinLimit: 2, MaxLimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	aother, _ := al.Acquire(ctx)
	ap, _ := al.Acquire(ctx)
	_, s := ap.Begin(ctx)
	s.End(nil)
	s.End(nil)
	ap.Release()
	ap.Release()
	if got := al.Active(); got != 1 {
		t.Errorf("adaptive: %d slots held after a second Release; want 1, the other call's", got)
	}
	aother.Release()

	br, err := breaker.New(breaker.Config{ConsecutiveFailures: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	bp, _ := br.Allow(ctx)
	bp.Done(boom)
	bp.Done(boom)
	if st := br.State(); st != breaker.Closed {
		t.Errorf("breaker: %v after one failed call done twice; want closed (2 failures trip it)", st)
	}

	rl, err := ratelimit.New(ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rp, _ := rl.Wait(ctx)
	if got := rp.Done(boom); got != boom {
		t.Errorf("ratelimit: Done returned %v", got)
	}
	if got := rp.Done(boom); got != boom {
		t.Errorf("ratelimit: a second Done returned %v; want its argument", got)
	}

	synctest.Test(t, func(t *testing.T) {
		timeouts := 0
		d, err := deadline.New(deadline.Config{Timeout: time.Second, OnTimeout: func(context.Context, time.Duration) { timeouts++ }})
		if err != nil {
			t.Fatal(err)
		}
		dctx, tm := d.Start(context.Background())
		<-dctx.Done()
		first := tm.Stop(dctx.Err())
		second := tm.Stop(dctx.Err())
		if !errors.Is(first, deadline.ErrExceeded) || errors.Is(second, deadline.ErrExceeded) || timeouts != 1 {
			t.Errorf("deadline: Stop twice = %v, %v with %d timeouts recorded; want one timeout, then the argument", first, second, timeouts)
		}
	})
}
