package keyed_test

import (
	"context"
	"testing"

	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
)

// BenchmarkKeyed compares a call through a bulkhead with one through a
// Group of bulkheads, to a live key: the Group's cost on the hit path.
func BenchmarkKeyed(b *testing.B) {
	nop := func(context.Context) error { return nil }
	b.Run("unkeyed", func(b *testing.B) {
		bh, _ := bulkhead.New(bulkhead.Config{Limit: 1 << 20})
		defer bh.Close()
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			bh.Execute(ctx, nop)
		}
	})
	b.Run("keyed", func(b *testing.B) {
		g, _ := keyed.NewGroup(keyed.Config{MaxKeys: 1000, New: func(string, string) (policy.Policy, error) {
			return bulkhead.New(bulkhead.Config{Limit: 1 << 20})
		}})
		defer g.Close()
		ctx := policy.WithKey(context.Background(), "tenant-a")
		g.Execute(ctx, nop)
		b.ReportAllocs()
		for b.Loop() {
			g.Execute(ctx, nop)
		}
	})
	b.Run("keyed-parallel", func(b *testing.B) {
		g, _ := keyed.NewGroup(keyed.Config{MaxKeys: 1000, New: func(string, string) (policy.Policy, error) {
			return bulkhead.New(bulkhead.Config{Limit: 1 << 20})
		}})
		defer g.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			ctx := policy.WithKey(context.Background(), randomKey()[:4])
			for pb.Next() {
				g.Execute(ctx, nop)
			}
		})
	})
}
