package ratelimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
)

// BenchmarkExecute measures admission on the success path: fn alone (the
// reference), a Limiter that was never held (two atomic loads: settings
// and hold), one whose hold has passed (a clock read), and one with a
// client-side rate that never makes a call wait (x/time/rate's ReserveN,
// under its mutex); and the rejection of an attempt that would wait too
// long for a hold.
func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, l *ratelimit.Limiter) {
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Execute(ctx, ok); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("fn", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := ok(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("no_hold", func(b *testing.B) {
		l, _ := ratelimit.New(ratelimit.Config{})
		run(b, l)
	})
	b.Run("hold_passed", func(b *testing.B) {
		l, _ := ratelimit.New(ratelimit.Config{})
		l.HoldFor(time.Nanosecond)
		time.Sleep(time.Millisecond)
		run(b, l)
	})
	b.Run("rate", func(b *testing.B) {
		l, _ := ratelimit.New(ratelimit.Config{RequestsPerSecond: 1e12, TokensPerMinute: 1e15})
		run(b, l)
	})
	b.Run("rejected", func(b *testing.B) {
		l, _ := ratelimit.New(ratelimit.Config{MaxHold: time.Hour, MaxWait: time.Millisecond})
		l.HoldFor(time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Execute(ctx, ok); err == nil {
				b.Fatal("admitted during the hold")
			}
		}
	})
}

// BenchmarkPipeline is a retry and breaker pipeline with and without a
// Limiter in its RateLimit slot: what the slot adds to a call.
func BenchmarkPipeline(b *testing.B) {
	for _, withLimit := range []bool{false, true} {
		name := "retry_breaker"
		if withLimit {
			name += "_ratelimit"
		}
		b.Run(name, func(b *testing.B) {
			rt, _ := retry.New(retry.Config{})
			br, _ := breaker.New(breaker.Config{})
			defer br.Close()
			pols := compose.Policies{Retry: rt, Breaker: br}
			if withLimit {
				pols.RateLimit, _ = ratelimit.New(ratelimit.Config{})
			}
			p, _ := compose.New("bench", pols)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Execute(ctx, ok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkObserve is the cost a Transport adds per response: a 200 with
// ordinary headers and none of the rate-limit ones, and one with OpenAI's
// six rate-limit headers, quota left.
func BenchmarkObserve(b *testing.B) {
	l, _ := ratelimit.New(ratelimit.Config{})
	plain := resp(200, "Content-Type", "application/json", "Date", "Thu, 03 Dec 2026 12:00:00 GMT", "Content-Length", "512")
	openai := resp(200, "Content-Type", "application/json",
		"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
		"x-ratelimit-limit-tokens", "60000", "x-ratelimit-remaining-tokens", "59000", "x-ratelimit-reset-tokens", "6m0s")
	for _, bb := range []struct {
		name string
		r    *http.Response
	}{{"plain", plain}, {"openai_headers", openai}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				observe(l, bb.r)
			}
		})
	}
}
