package adaptive_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
)

func newSimLimiter(t *testing.T) *adaptive.Limiter {
	t.Helper()
	l, err := adaptive.New(adaptive.Config{Name: "sim", MaxQueue: adaptive.Unbounded})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestConverges: from InitialLimit 20, against a dependency of capacity 10
// and base latency 20 ms, the limit settles in [C, 2C] within 10 s (at
// Tolerance x C + 1 = 13.5 in theory); when the capacity drops to 5 it
// follows within 10 s.
func TestConverges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &dependency{capacity: 10, base: 20 * time.Millisecond}
		l := newSimLimiter(t)
		stop := startLoad(l, dep, 40)
		defer stop()
		var tr trajectory
		tr.run(l, 10*time.Second, 100*time.Millisecond)
		lo, hi := tr.span(5*time.Second, 10*time.Second)
		t.Logf("C=10: noLoad %v; estimate 5-10 s in [%.2f, %.2f];%v", l.State().NoLoad, lo, hi, &tr)
		t.Logf("first 2 s:%s", tr.format(0, 2*time.Second, 100*time.Millisecond))
		if st := l.State(); st.NoLoad != 20*time.Millisecond {
			t.Errorf("noLoad = %v; want 20ms", st.NoLoad)
		}
		if lo < 10 || hi > 20 {
			t.Errorf("C=10: estimate in [%.2f, %.2f] from 5 s to 10 s; want within [10, 20]", lo, hi)
		}

		dep.set(5, 20*time.Millisecond)
		tr.run(l, 10*time.Second, 100*time.Millisecond)
		lo, hi = tr.span(15*time.Second, 20*time.Second)
		t.Logf("C=5: estimate 15-20 s in [%.2f, %.2f]; probes %d;%v", lo, hi, l.State().Probes, &tr)
		t.Logf("10-12 s:%s", tr.format(10*time.Second, 12*time.Second, 100*time.Millisecond))
		if lo < 5 || hi > 10 {
			t.Errorf("C=5: estimate in [%.2f, %.2f] from 5 s to 10 s after the drop; want within [5, 10]", lo, hi)
		}
	})
}

// TestBaseLatencyIncident: the base latency doubles (an incident: the
// dependency got slower at any load). The fall of the limit triggers an
// early probe, which measures the new base, and the limit settles again
// near Tolerance x C + 1, neither collapsing to MinLimit nor drifting up
// over 300 s.
func TestBaseLatencyIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dep := &dependency{capacity: 10, base: 20 * time.Millisecond}
		l := newSimLimiter(t)
		stop := startLoad(l, dep, 40)
		defer stop()
		var tr trajectory
		tr.run(l, 10*time.Second, 100*time.Millisecond)
		before := l.State()
		dep.set(10, 40*time.Millisecond)
		tr.run(l, 300*time.Second, 100*time.Millisecond)
		after := l.State()
		lo, hi := tr.span(10*time.Second, 310*time.Second)
		at60, atEnd := tr.estAt(70*time.Second), tr.estAt(310*time.Second)
		settledLo, settledHi := tr.span(20*time.Second, 310*time.Second)
		t.Logf("before: %+v; after 300 s: %+v; estimate over the incident in [%.2f, %.2f], from 10 s in [%.2f, %.2f]; 60 s in %.2f, 300 s in %.2f",
			before, after, lo, hi, settledLo, settledHi, at60, atEnd)
		t.Logf("first 30 s:%v", &trajectory{at: tr.at[:300], est: tr.est[:300]})
		t.Logf("10-13 s:%s", tr.format(10*time.Second, 13*time.Second, 100*time.Millisecond))
		if probes := after.Probes - before.Probes; probes < 10 || probes > 14 {
			t.Errorf("%d probes in 300 s; want one every 30 s, and an early one or so", probes)
		}
		if after.NoLoad != 40*time.Millisecond {
			t.Errorf("noLoad after the incident = %v; want 40ms (re-measured)", after.NoLoad)
		}
		if lo < 2 {
			t.Errorf("the estimate fell to %.2f: collapsed towards MinLimit", lo)
		}
		if settledLo < 10 || settledHi > 20 {
			t.Errorf("estimate from 10 s into the incident in [%.2f, %.2f]; want within [C, 2C] = [10, 20]", settledLo, settledHi)
		}
		if atEnd < 0.8*at60 || atEnd > 1.2*at60 {
			t.Errorf("estimate 60 s into the incident %.2f, at 300 s %.2f: drifted more than 20%%", at60, atEnd)
		}
	})
}

// TestInstantErrorsDoNotRaise: a dependency that fails at once gives no
// latency samples; nothing raises the limit, from the start or after it
// settled.
func TestInstantErrorsDoNotRaise(t *testing.T) {
	t.Parallel() // a long simulation in a bubble of its own
	boom := errors.New("boom")
	synctest.Test(t, func(t *testing.T) {
		dep := &dependency{capacity: 10, base: 20 * time.Millisecond, fail: boom}
		l := newSimLimiter(t)
		stop := startLoad(l, dep, 40)
		defer stop()
		var tr trajectory
		tr.run(l, 10*time.Second, 100*time.Millisecond)
		if _, hi := tr.span(0, 10*time.Second); hi > 20 {
			t.Errorf("estimate rose to %.2f on instant errors from the start; want <= InitialLimit 20", hi)
		}
		if l.Limit() > 20 {
			t.Errorf("Limit() = %d", l.Limit())
		}
		// Settle on a working dependency, then fail at once.
		dep.failWith(nil)
		tr.run(l, 10*time.Second, 100*time.Millisecond)
		settled := l.State().Estimate
		dep.failWith(boom)
		tr.run(l, 30*time.Second, 100*time.Millisecond)
		_, hi := tr.span(20*time.Second, 50*time.Second)
		t.Logf("settled at %.2f; on instant errors at most %.2f; %+v", settled, hi, l.State())
		if hi > settled {
			t.Errorf("estimate rose from %.2f to %.2f on instant errors", settled, hi)
		}
	})
}
