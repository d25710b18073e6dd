package route

import (
	"context"
	"fmt"
	"testing"
)

//go:noinline
func bare(ctx context.Context) error { return nil }

// BenchmarkPick measures the pick alone, the choice of an endpoint among
// 8 by the power of two choices (a clock read included), beside a bare
// call, and the whole of a routed attempt's bookkeeping: Pick and Done.
func BenchmarkPick(b *testing.B) {
	eps := make([]Endpoint, 8)
	for i := range eps {
		eps[i].Name = fmt.Sprint("e", i)
	}
	r, err := New(Config{Name: "bench", Endpoints: eps})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	for range 100 { // every endpoint with an estimate
		for i := range 8 {
			_, p, _ := r.Pick(ctx, 0, ^uint64(1<<i))
			p.Done(nil)
		}
	}
	b.Run("op=bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			bare(ctx)
		}
	})
	b.Run("op=choose8", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.choose(r.set.Load(), r.now(), 0, 0)
		}
	})
	b.Run("op=attempt8", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, p, _ := r.Pick(ctx, 0, 0)
			p.Done(nil)
		}
	})
}
