package route_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/route"
)

func TestNewErrors(t *testing.T) {
	var nilBreaker *breaker.Breaker
	al, err := adaptive.New(adaptive.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	two := func(mod func(*route.Endpoint)) []route.Endpoint {
		eps := names(2)
		mod(&eps[1])
		return eps
	}
	for _, tc := range []struct {
		cfg  route.Config
		want string
	}{
		{route.Config{Endpoints: names(1)}, "Config.Name"},
		{route.Config{Name: "r"}, "Config.Endpoints must not be empty"},
		{route.Config{Name: "r", Endpoints: make([]route.Endpoint, 65)}, "more than 64"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Name = "e0" })}, `Endpoints[1].Name "e0" is also endpoint 0's`},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Name = "" })}, "Endpoints[1].Name must not be empty"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Weight = -1 })}, "Endpoints[1].Weight"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Weight = math.NaN() })}, "Endpoints[1].Weight"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Weight = math.Inf(1) })}, "Endpoints[1].Weight"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Weight = 1e-305 })}, "Endpoints[1].Weight"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Weight = 1e308 })}, "Endpoints[1].Weight"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.MaxConcurrent = -1 })}, "Endpoints[1].MaxConcurrent"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.Breaker = nilBreaker })}, "Endpoints[1].Breaker is a nil *breaker.Breaker"},
		{route.Config{Name: "r", Endpoints: two(func(e *route.Endpoint) { e.RateLimit = al })}, "Endpoints[1].RateLimit holds a *adaptive.Limiter"},
		{route.Config{Name: "r", Endpoints: names(2), Decay: -1}, "Config.Decay"},
		{route.Config{Name: "r", Endpoints: names(2), Decay: math.MaxInt64}, "Config.Decay"},
		{route.Config{Name: "r", Endpoints: names(2), OutlierFactor: 1}, "Config.OutlierFactor"},
		{route.Config{Name: "r", Endpoints: names(2), OutlierFactor: math.NaN()}, "Config.OutlierFactor"},
		{route.Config{Name: "r", Endpoints: names(2), MaxEjectedShare: 1.5}, "Config.MaxEjectedShare"},
		{route.Config{Name: "r", Endpoints: names(2), MaxEjectedShare: -0.1}, "Config.MaxEjectedShare"},
		{route.Config{Name: "r", Endpoints: names(2), ProbeInterval: -time.Second}, "Config.ProbeInterval"},
		{route.Config{Name: "r", Endpoints: names(2), ProbeInterval: 25 * time.Hour}, "Config.ProbeInterval"},
	} {
		r, err := route.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "route: ") {
			t.Errorf("New(%+v) = %v, %v; want an error with %q", tc.cfg, r, err, tc.want)
		}
	}
}

// TestComposeRefusesSharedSlots checks that a Route does not sit beside
// the slots its endpoints fill, and that an endpoint's Attempt fits the
// Deadline.
func TestComposeRefusesSharedSlots(t *testing.T) {
	b, _ := breaker.New(breaker.Config{})
	defer b.Close()
	long, _ := deadline.New(deadline.Config{Timeout: 2 * time.Second})
	short, _ := deadline.New(deadline.Config{Timeout: time.Second})
	r := newRouter(t, route.Config{Endpoints: names(2)})
	if _, err := compose.New("p", compose.Policies{Breaker: b, Route: r}); err == nil || !strings.Contains(err.Error(), "Policies.Breaker and Policies.Route") {
		t.Errorf("New with a Breaker and a Route = %v; want an error naming both", err)
	}
	eps := names(2)
	eps[1].Attempt = long
	r = newRouter(t, route.Config{Endpoints: eps})
	if _, err := compose.New("p", compose.Policies{Deadline: short, Route: r}); err == nil || !strings.Contains(err.Error(), "e1") {
		t.Errorf("New with an endpoint Attempt longer than the Deadline = %v; want an error naming the endpoint", err)
	}
}
