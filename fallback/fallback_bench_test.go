package fallback_test

import (
	"context"
	"testing"

	"github.com/watertight/watertight/fallback"
)

// BenchmarkDo is a call whose first alternative succeeds, against calling
// its fn directly: what Do adds on the success path (the delivery mark and
// its context).
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	b.Run("fn", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fn(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	alts := []fallback.Alternative[int]{{Name: "openai", Fn: fn}, {Name: "anthropic", Fn: fn}}
	b.Run("do", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fallback.Do(ctx, fallback.Config{}, alts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
