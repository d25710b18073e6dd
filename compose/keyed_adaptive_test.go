package compose_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// TestKeyedAdaptiveOutsideBulkheadSlotLearns: compose refuses an adaptive
// limit outside the Bulkhead slot, where it would never learn (package
// adaptive: "compose rejects it elsewhere"). A keyed.Group of adaptive
// limits in the Breaker slot, under a plain bulkhead, is accepted; its
// limits must then learn as one in the Bulkhead slot does, or the
// pipeline must refuse it.
func TestKeyedAdaptiveOutsideBulkheadSlotLearns(t *testing.T) {
	cfg := adaptive.Config{InitialLimit: 4, MinLimit: 1, MaxLimit: 1000}
	var lim *adaptive.Limiter
	g, err := keyed.NewGroup(keyed.Config{MaxKeys: 1, New: func(string, string) (policy.Policy, error) {
		l, err := adaptive.New(cfg)
		lim = l
		return l, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b, _ := bulkhead.New(bulkhead.Config{Limit: 1000})
	defer b.Close()
	p, err := compose.New("keyed-adaptive", compose.Policies{Bulkhead: b, Breaker: g})
	if err != nil {
		return // refused: as documented for an adaptive limit outside the Bulkhead slot
	}
	direct, _ := adaptive.New(cfg)
	defer direct.Close()
	pd, _ := compose.New("adaptive", compose.Policies{Bulkhead: direct})
	ctx := policy.WithKey(context.Background(), "us")
	slow := func(context.Context) error { time.Sleep(200 * time.Microsecond); return nil }
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				p.Execute(ctx, slow)
				pd.Execute(ctx, slow)
			}
		})
	}
	wg.Wait()
	if direct.Limit() != cfg.InitialLimit && lim.Limit() == cfg.InitialLimit {
		t.Errorf("after 1600 calls, the Bulkhead slot's limit learned (%d -> %d), the key's stayed at %d: it had no sample",
			cfg.InitialLimit, direct.Limit(), lim.Limit())
	}
}
