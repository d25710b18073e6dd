package compose_test

import (
	"context"
	"errors"
	"testing"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// TestKeyedSlot: a keyed.Group of breakers in the Breaker slot gives each
// host its own breaker, with the rest of the pipeline shared, through
// Execute and through Start's hand-over; it allocates no more per call
// than one breaker in the slot.
func TestKeyedSlot(t *testing.T) {
	g, err := keyed.NewGroup(keyed.Config{MaxKeys: 8, New: func(string, string) (policy.Policy, error) {
		return breaker.New(breaker.Config{ConsecutiveFailures: 2})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p, err := compose.New("keyed", compose.Policies{Breaker: g})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	eu, us := policy.WithKey(context.Background(), "eu"), policy.WithKey(context.Background(), "us")
	for range 2 {
		p.Execute(eu, func(context.Context) error { return boom })
	}
	if err := p.Execute(eu, nop); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("eu after two failures = %v, want its breaker open", err)
	}
	if err := p.Execute(us, nop); err != nil {
		t.Errorf("us while eu's breaker is open = %v", err)
	}
	// Hand-over: the key stays held until End. With room for one key, a
	// second key finds none while the first is held.
	one, err := keyed.NewGroup(keyed.Config{MaxKeys: 1, New: func(string, string) (policy.Policy, error) {
		return breaker.New(breaker.Config{})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	q, _ := compose.New("one", compose.Policies{Breaker: one})
	h, err := q.Start(us, func(context.Context) error { return compose.ErrHandOver })
	if err != nil || h == nil {
		t.Fatalf("Start = %v, %v", h, err)
	}
	if err := q.Execute(eu, nop); !errors.Is(err, keyed.ErrNoPolicy) {
		t.Errorf("another key while the first is handed over = %v, want keys_full", err)
	}
	if err := h.End(boom); !errors.Is(err, boom) {
		t.Errorf("End = %v", err)
	}
	if err := q.Execute(eu, nop); err != nil {
		t.Errorf("another key once the first ended = %v", err)
	}
	single, _ := breaker.New(breaker.Config{})
	defer single.Close()
	plain, _ := compose.New("plain", compose.Policies{Breaker: single})
	want := testing.AllocsPerRun(100, func() { plain.Execute(us, nop) })
	if got := testing.AllocsPerRun(100, func() { p.Execute(us, nop) }); got != want {
		t.Errorf("%v allocations per keyed call, %v with one breaker", got, want)
	}
}

func nop(context.Context) error { return nil }
