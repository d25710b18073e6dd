package compose_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/retry"
)

// TestRejections checks that a pipeline counts its rejected calls by
// policy and reason only once CountRejections is called, a retry that
// gave up on a rejection included, and nothing else.
func TestRejections(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Name: "slots", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	br, err := breaker.New(breaker.Config{Name: "br", ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	r, err := retry.New(retry.Config{MaxAttempts: 2, InitialInterval: time.Nanosecond, MaxInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := compose.New("p", compose.Policies{Bulkhead: bh, Retry: r, Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	fail := func(context.Context) error { return errors.New("down") }
	p.Execute(context.Background(), fail) // opens the breaker
	p.Execute(context.Background(), fail) // refused
	if got := p.Rejections(); len(got) != 0 {
		t.Errorf("before CountRejections: %v; want none counted", got)
	}
	p.CountRejections()
	p.Execute(context.Background(), fail) // refused by the open breaker, through the retry
	held, err := bh.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.Execute(context.Background(), fail) // the bulkhead is full
	p.Execute(context.Background(), fail)
	held.Release()
	want := []compose.RejectionCount{
		{Kind: "breaker", Name: "br", Reason: "open", Calls: 1},
		{Kind: "bulkhead", Name: "slots", Reason: "full", Calls: 2},
	}
	if got := p.Rejections(); !reflect.DeepEqual(got, want) {
		t.Errorf("Rejections() = %+v; want %+v", got, want)
	}
}

// TestRejectionsRetryGaveUp checks that a retry that gave up because a
// later attempt was rejected counts as that rejection.
func TestRejectionsRetryGaveUp(t *testing.T) {
	br, err := breaker.New(breaker.Config{Name: "br", ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	r, err := retry.New(retry.Config{MaxAttempts: 3, InitialInterval: time.Nanosecond, MaxInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := compose.New("p", compose.Policies{Retry: r, Breaker: br})
	if err != nil {
		t.Fatal(err)
	}
	p.CountRejections()
	// The first attempt fails and opens the breaker; the second is refused.
	err = p.Execute(context.Background(), func(context.Context) error { return errors.New("down") })
	want := []compose.RejectionCount{{Kind: "breaker", Name: "br", Reason: "open", Calls: 1}}
	if got := p.Rejections(); !reflect.DeepEqual(got, want) {
		t.Errorf("after %v: Rejections() = %+v; want %+v", err, got, want)
	}
}
