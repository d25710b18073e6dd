package ratelimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// An attempt that read the settings before an Update lowered TokenBurst
// draws the new burst, as the cost of a larger one does.
func TestReserveAfterTokenBurstLowered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{TokensPerMinute: 6000, TokenBurst: 100})
		if err != nil {
			t.Fatal(err)
		}
		s := l.cur.Load()
		if err := l.Update(Config{TokensPerMinute: 6000, TokenBurst: 10}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		p, err := l.reserve(WithCost(context.Background(), 50), s, false)
		if err != nil || time.Since(start) != 0 {
			t.Fatalf("admitted after %v: %v; want at once", time.Since(start), err)
		}
		p.Done(nil)
		if got := s.tokens.TokensAt(start); got != 0 {
			t.Errorf("%v tokens left, want 0: the new burst drawn", got)
		}
	})
}
