package adaptive_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/adaptive"
)

// A ProbeInterval no longer than a few windows must not leave every window to
// a probe: the limit still learns.
func TestShortProbeIntervalStillLearns(t *testing.T) {
	t.Parallel() // long simulations, each in a bubble of its own
	for _, tc := range []struct {
		name  string
		probe time.Duration
		base  time.Duration
	}{
		{"probe 50ms, latency 20ms", 50 * time.Millisecond, 20 * time.Millisecond},
		{"probe 1s, latency 600ms", time.Second, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				dep := &dependency{capacity: 100, base: tc.base} // never congested: the limit should climb
				l := mustNew(t, adaptive.Config{ProbeInterval: tc.probe, MaxQueue: adaptive.Unbounded})
				stop := startLoad(l, dep, 150)
				time.Sleep(60 * time.Second)
				stop()
				if st := l.State(); st.Estimate <= 20 {
					t.Errorf("after 60 s against an uncongested dependency: estimate %.2f, %d probes; want it above InitialLimit 20", st.Estimate, st.Probes)
				}
			})
		})
	}
}
