package deadline

import (
	"context"
	"testing"
	"time"
)

func nop(context.Context) error { return nil }

// BenchmarkExecute is the success path with a timer: compare it with
// BenchmarkWithTimeoutFloor, the cost of any context-based timeout.
func BenchmarkExecute(b *testing.B) {
	d := mustNew(b, Config{Name: "bench", Timeout: time.Minute})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d.Execute(ctx, nop)
	}
}

// BenchmarkStartStop is the two-step success path compose uses.
func BenchmarkStartStop(b *testing.B) {
	d := mustNew(b, Config{Name: "bench", Timeout: time.Minute})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		inner, timer := d.Start(ctx)
		timer.Stop(nop(inner))
	}
}

// BenchmarkWithTimeoutFloor is the naive reference: context.WithTimeout and
// its cancel, which every cooperative timeout must pay.
func BenchmarkWithTimeoutFloor(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		inner, cancel := context.WithTimeout(ctx, time.Minute)
		nop(inner)
		cancel()
	}
}

// BenchmarkExecuteParentSooner is a call whose caller's deadline comes
// first: no timer is set.
func BenchmarkExecuteParentSooner(b *testing.B) {
	d := mustNew(b, Config{Name: "bench", Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		d.Execute(ctx, nop)
	}
}

// BenchmarkExecuteParallel is the success path from many goroutines at once:
// a Deadline shares no mutable state between calls.
func BenchmarkExecuteParallel(b *testing.B) {
	d := mustNew(b, Config{Name: "bench", Timeout: time.Minute})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			d.Execute(ctx, nop)
		}
	})
}
