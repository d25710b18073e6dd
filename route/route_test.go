package route_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/route"
)

func TestSpreadsEvenly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(3, 100*time.Millisecond)
		r := newRouter(t, route.Config{Endpoints: names(3)})
		p := pipeline(t, compose.Policies{Route: r})
		if errs := load(t.Context(), p, m.fn, 100, 20*time.Second); errs != 0 {
			t.Fatalf("%d errors", errs)
		}
		for i, n := range m.counts() {
			if n < 500 || n > 850 {
				t.Errorf("endpoint %d got %d of 2000 calls; want about a third: %v", i, n, m.counts())
			}
		}
	})
}

func TestSlowEndpointAvoided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newModel(3, 2*time.Second)
		r := newRouter(t, route.Config{Endpoints: names(3)})
		p := pipeline(t, compose.Policies{Route: r})
		load(t.Context(), p, m.fn, 50, 10*time.Second)
		m.set(1, 30*time.Second, nil, false)
		m.reset()
		load(t.Context(), p, m.fn, 50, 60*time.Second)
		c := m.counts()
		t.Logf("calls per endpoint with e1 slow: %v", c)
		if total := c[0] + c[1] + c[2]; c[1]*100 > total*2 {
			t.Errorf("slow endpoint got %d of %d calls; want at most 2%%", c[1], total)
		}
	})
}
