package adaptive_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/internal/stage"
	"github.com/watertight/watertight/policy"
)

// streamCall runs one streamed call through p as httppolicy's Transport
// does: the attempt's answer marked when the headers
// arrive (after hdr), the slot held for the body (body, plus up to half as
// much again at random).
func streamCall(ctx context.Context, p *compose.Pipeline, hdr, body time.Duration) error {
	return p.Execute(ctx, func(ctx context.Context) error {
		time.Sleep(hdr)
		stage.Answered(ctx)
		time.Sleep(body + time.Duration(rand.Int64N(int64(body/2)+1)))
		return nil
	})
}

// streamsDrift runs workers callers of streamed answers for total (the
// limiter in a pipeline's Bulkhead slot, its MaxLimit the callers' number,
// so that they reach it and periodic probes run), the headers taking hdr1
// and the bodies body1 for the first half, hdr2 and body2 for the second.
// The no-load latency must then be hdr2: probes must measure streams
// however long their bodies last.
func streamsDrift(t *testing.T, workers int, hdr1, hdr2, body1, body2, total time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MaxLimit: workers})
		p, err := compose.New("llm", compose.Policies{Bulkhead: l})
		if err != nil {
			t.Fatal(err)
		}
		var hdr, body atomic.Int64
		hdr.Store(int64(hdr1))
		body.Store(int64(body1))
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var ok, rejected [2]atomic.Int64
		var capped [2]int
		var phase atomic.Int32
		for range workers {
			wg.Go(func() {
				for ctx.Err() == nil {
					err := streamCall(ctx, p, time.Duration(hdr.Load()), time.Duration(body.Load()))
					switch {
					case errors.Is(err, policy.ErrRejected):
						rejected[phase.Load()].Add(1)
						time.Sleep(100 * time.Millisecond)
					case err == nil:
						ok[phase.Load()].Add(1)
					}
				}
			})
		}
		var s0 adaptive.State
		for i := range int(total / time.Second) {
			if time.Duration(i)*time.Second == total/2 {
				s0 = l.State()
				hdr.Store(int64(hdr2))
				body.Store(int64(body2))
				phase.Store(1)
			}
			time.Sleep(time.Second)
			if l.Admission() < l.Limit() {
				capped[phase.Load()]++
			}
		}
		stop()
		wg.Wait()
		s1 := l.State()
		t.Logf("before the drift: %+v, capped %d of %d s, ok %d, rejected %d", s0, capped[0], total/time.Second/2, ok[0].Load(), rejected[0].Load())
		t.Logf("after the drift:  %+v, capped %d of %d s, ok %d, rejected %d", s1, capped[1], total/time.Second/2, ok[1].Load(), rejected[1].Load())
		if !s0.Measured || s0.NoLoad != hdr1 {
			t.Errorf("noLoad %v (measured %v) before the drift; want the headers' %v", s0.NoLoad, s0.Measured, hdr1)
		}
		if s1.NoLoad != hdr2 {
			t.Errorf("noLoad %v after the headers drifted to %v (probes: %d before, %d after)", s1.NoLoad, hdr2, s0.Probes, s1.Probes)
		}
		checkCounts(t, l, 0, 0)
	})
}

// Streams whose bodies last 10 to 150 times their time to headers (an LLM
// behind httppolicy), 20 callers, then a drift of both. A probe caps the
// calls awaiting their answer, not the slots: a call whose headers arrived no
// longer counts against the probe's cap.
func TestStreamsDrift(t *testing.T) {
	for _, tt := range []struct {
		name                     string
		hdr1, hdr2, body1, body2 time.Duration
	}{
		{"hdr2s-4s_body60s", 2 * time.Second, 4 * time.Second, 60 * time.Second, 60 * time.Second},
		{"hdr200ms-2s_body30s", 200 * time.Millisecond, 2 * time.Second, 30 * time.Second, 30 * time.Second},
		{"hdr200ms-2s_body2s-60s", 200 * time.Millisecond, 2 * time.Second, 2 * time.Second, 60 * time.Second},
		{"hdr2s-2s_body60s", 2 * time.Second, 2 * time.Second, 60 * time.Second, 60 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			streamsDrift(t, 20, tt.hdr1, tt.hdr2, tt.body1, tt.body2, 1200*time.Second)
		})
	}
}

// A slow dependency (1 to 5 s) under steady load that reaches the limit
// (12 callers, MaxLimit 12) drifts to 2 to 10 s: the periodic probe
// re-measures noLoad. The latencies cycle through 1, 1.5,
// ..., 5 s (times 2 after the drift), so that any 10 consecutive calls
// have a median of about 3 s (6 s); uniform random latencies would give
// medians of 10 that overlap now and then.
func TestSlowSteadyDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, adaptive.Config{MaxQueue: adaptive.Unbounded, MaxLimit: 12})
		var scale, n atomic.Int64
		scale.Store(1)
		lat := func() time.Duration {
			return time.Duration(scale.Load()) * (time.Second + time.Duration(n.Add(1)%9)*500*time.Millisecond)
		}
		c1, n1 := drive(l, 12, 300*time.Second, lat)
		s0 := l.State()
		scale.Store(2)
		c2, n2 := drive(l, 12, 300*time.Second, lat)
		s1 := l.State()
		t.Logf("1-5 s:  %+v limit %d capped %d/%d", s0, l.Limit(), c1, n1)
		t.Logf("2-10 s: %+v limit %d capped %d/%d", s1, l.Limit(), c2, n2)
		if s0.NoLoad < 2*time.Second || s0.NoLoad > 4*time.Second {
			t.Errorf("noLoad %v at 1 to 5 s; want 2 to 4 s", s0.NoLoad)
		}
		if s1.NoLoad < 4*time.Second || s1.NoLoad > 8*time.Second || s1.Probes <= s0.Probes {
			t.Errorf("noLoad %v after the drift to 2 to 10 s (probes %d, then %d); want it re-measured, 4 to 8 s", s1.NoLoad, s0.Probes, s1.Probes)
		}
	})
}
