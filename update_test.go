package watertight_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/adaptive"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/httppolicy"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
)

func mustPipeline(t *testing.T, cfg watertight.Config, opts ...compose.Option) *watertight.Pipeline {
	t.Helper()
	p, err := watertight.New("chat", cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPipelineUpdateInPlace checks that an update changes the policies New
// built in place, and that Config returns what was given.
func TestPipelineUpdateInPlace(t *testing.T) {
	p := mustPipeline(t, watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10},
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
		Attempt:  &deadline.Config{Timeout: 2 * time.Second},
	})
	b := p.Bulkhead()
	if err := p.Update(watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 3, MaxQueue: 2},
		Deadline: &deadline.Config{Timeout: 4 * time.Second},
		Attempt:  &deadline.Config{Timeout: time.Second},
	}); err != nil {
		t.Fatal(err)
	}
	if p.Bulkhead() != b || b.Limit() != 3 || b.Config().MaxQueue != 2 {
		t.Errorf("bulkhead %p (was %p), Limit %d, Config %+v; want the same bulkhead, limit 3, queue 2", p.Bulkhead(), b, b.Limit(), b.Config())
	}
	if b.Config().Name != "chat" {
		t.Errorf("bulkhead Name %q; want chat, as New named it", b.Config().Name)
	}
	got := p.Config()
	if got.Bulkhead.Limit != 3 || got.Deadline.Timeout != 4*time.Second || got.Attempt.Timeout != time.Second || got.Bulkhead.Name != "" {
		t.Errorf("Config %+v %+v %+v; want the update as given", *got.Bulkhead, *got.Deadline, *got.Attempt)
	}
	got.Bulkhead.Limit = 99 // a copy
	if p.Config().Bulkhead.Limit != 3 {
		t.Error("changing the Config returned changed the Config in force")
	}
}

// TestPipelineUpdateRefusals checks that an update New would refuse, or
// one that adds, removes or swaps a section, changes nothing and names
// the section.
func TestPipelineUpdateRefusals(t *testing.T) {
	in := watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10},
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
		Attempt:  &deadline.Config{Timeout: 2 * time.Second},
	}
	p := mustPipeline(t, in)
	with := func(f func(*watertight.Config)) watertight.Config {
		c := watertight.Config{Bulkhead: &bulkhead.Config{Limit: 4}, Deadline: &deadline.Config{Timeout: 5 * time.Second},
			Attempt: &deadline.Config{Timeout: 2 * time.Second}}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  watertight.Config
		want string
	}{
		{"invalid section", with(func(c *watertight.Config) { c.Bulkhead.Limit = 0 }), "watertight: Bulkhead: Config.Limit must be >= 1, got 0"},
		{"invalid with a valid change", with(func(c *watertight.Config) { c.Deadline.Timeout = -1 }), "watertight: Deadline: Config.Timeout must be > 0"},
		{"attempt longer than deadline", with(func(c *watertight.Config) { c.Attempt.Timeout = 6 * time.Second }), "Attempt: Timeout 6s is longer than the Deadline's Timeout 5s"},
		{"removed", with(func(c *watertight.Config) { c.Deadline = nil; c.Attempt = nil }), "Deadline: the pipeline has a Deadline section, and a section cannot be removed"},
		{"added", with(func(c *watertight.Config) { c.Breaker = &breaker.Config{} }), "Breaker: the pipeline has no Breaker section, and a section cannot be added"},
		{"swapped", with(func(c *watertight.Config) { c.Bulkhead = nil; c.Adaptive = &adaptive.Config{} }), "Bulkhead: the pipeline has a Bulkhead section"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Update(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Update = %v; want an error containing %q", err, tc.want)
			}
			if p.Bulkhead().Limit() != 10 || p.Config().Bulkhead.Limit != 10 || p.Config().Deadline.Timeout != 5*time.Second {
				t.Errorf("after a refused update: limit %d, Config %+v; want the Config in force unchanged", p.Bulkhead().Limit(), *p.Config().Bulkhead)
			}
		})
	}
	_, want := watertight.New("chat", with(func(c *watertight.Config) { c.Bulkhead.Limit = 0 }))
	if err := p.Update(with(func(c *watertight.Config) { c.Bulkhead.Limit = 0 })); err.Error() != want.Error() {
		t.Errorf("Update error %q; want New's %q", err, want)
	}
}

// TestPipelineUpdateCounted checks watertight.config.updates by result.
func TestPipelineUpdateCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := mustPipeline(t, watertight.Config{Bulkhead: &bulkhead.Config{Limit: 2}}, compose.WithMeterProvider(mp))
	for _, limit := range []int{3, 0, 4, -1, 5} {
		_ = p.Update(watertight.Config{Bulkhead: &bulkhead.Config{Limit: limit}})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "watertight.config.updates" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				r, _ := dp.Attributes.Value("watertight.update.result")
				pl, _ := dp.Attributes.Value("watertight.pipeline.name")
				got[pl.AsString()+"/"+r.AsString()] += dp.Value
			}
		}
	}
	if got["chat/applied"] != 3 || got["chat/refused"] != 2 {
		t.Errorf("watertight.config.updates = %v; want chat/applied 3, chat/refused 2", got)
	}
}

// TestClientUpdateResizesPool checks that the client's connection pool
// follows the bulkhead's limit, and is kept while it does not change.
func TestClientUpdateResizesPool(t *testing.T) {
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3}}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := watertight.PoolOf(c, 0)
	if err := c.Update(watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3, MaxQueue: 1}}); err != nil {
		t.Fatal(err)
	}
	if watertight.PoolOf(c, 0) != first {
		t.Error("the pool was replaced though its cap did not change")
	}
	if err := c.Update(watertight.Config{Bulkhead: &bulkhead.Config{Limit: 5}}); err != nil {
		t.Fatal(err)
	}
	if got := watertight.PoolOf(c, 0); got == first || got.MaxConnsPerHost != 5 || got.MaxIdleConnsPerHost != 5 {
		t.Errorf("after Limit 5: MaxConnsPerHost %d; want a new pool capped at 5", got.MaxConnsPerHost)
	}
	if err := c.Update(watertight.Config{Bulkhead: &bulkhead.Config{Limit: 0}}); err == nil || watertight.PoolOf(c, 0).MaxConnsPerHost != 5 {
		t.Errorf("an invalid update: %v; want an error and the pool kept", err)
	}
}

// TestClientSetStreamTimeouts checks that new stream timeouts apply to the
// next request, and that a negative one is refused.
func TestClientSetStreamTimeouts(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select { // headers, then nothing
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := watertight.NewHTTPClient("llm", watertight.Config{}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetStreamTimeouts(-1, 0); err == nil {
		t.Error("a negative first-byte timeout was accepted")
	}
	if err := c.SetStreamTimeouts(50*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	// A bound of its own, so that without the timeout the test fails
	// instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, httppolicy.ErrFirstByteTimeout) {
		t.Errorf("headers then nothing: %v; want the first-byte timeout set at run time", err)
	}
}

// TestPipelineUpdateRoute checks that an update reaches the router and the
// policies New built for each endpoint, and that a Route keeps its
// endpoints.
func TestPipelineUpdateRoute(t *testing.T) {
	eps := func(wa float64) *route.Config {
		return &route.Config{Endpoints: []route.Endpoint{{Name: "a", Weight: wa}, {Name: "b"}}}
	}
	p := mustPipeline(t, watertight.Config{
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
		Breaker:  &breaker.Config{ConsecutiveFailures: 5},
		Attempt:  &deadline.Config{Timeout: 2 * time.Second},
		Route:    eps(0),
	})
	if err := p.Update(watertight.Config{
		Deadline: &deadline.Config{Timeout: 5 * time.Second},
		Breaker:  &breaker.Config{ConsecutiveFailures: 2},
		Attempt:  &deadline.Config{Timeout: time.Second},
		Route:    eps(3),
	}); err != nil {
		t.Fatal(err)
	}
	got := p.Router().Config().Endpoints
	if got[0].Weight != 3 || got[1].Weight != 0 {
		t.Errorf("router weights %v, %v; want 3 and 0", got[0].Weight, got[1].Weight)
	}
	for _, e := range got {
		b := e.Breaker.(*breaker.Breaker).Config()
		a := e.Attempt.(*deadline.Deadline)
		if b.ConsecutiveFailures != 2 || b.Name != "chat.a" && b.Name != "chat.b" || a.Timeout() != time.Second {
			t.Errorf("endpoint %s: breaker %+v, attempt %v; want 2 failures, its own name, 1s", e.Name, b, a.Timeout())
		}
	}
	renamed := eps(1)
	renamed.Endpoints[1].Name = "c"
	if err := p.Update(watertight.Config{Deadline: &deadline.Config{Timeout: 5 * time.Second}, Breaker: &breaker.Config{},
		Attempt: &deadline.Config{Timeout: time.Second}, Route: renamed}); err == nil || !strings.Contains(err.Error(), "Endpoints") {
		t.Errorf("an update renaming an endpoint: %v; want it refused, naming Endpoints", err)
	}
	if err := p.Update(watertight.Config{Deadline: &deadline.Config{Timeout: 5 * time.Second}, Breaker: &breaker.Config{},
		Attempt: &deadline.Config{Timeout: time.Second}, Route: &route.Config{Decay: time.Minute}}); err != nil {
		t.Fatalf("a Route with no Endpoints: %v; want the endpoints kept", err)
	}
	if c := p.Router().Config(); c.Decay != time.Minute || len(c.Endpoints) != 2 || c.Endpoints[0].Weight != 3 {
		t.Errorf("router Config %+v; want Decay 1m and the endpoints in force", c)
	}
}

// TestClientUpdateResizesEndpointPools checks that each endpoint's pool
// follows its MaxConcurrent, or the bulkhead's limit without one.
func TestClientUpdateResizesEndpointPools(t *testing.T) {
	hep := func(name string, max int) watertight.HTTPEndpoint {
		return watertight.HTTPEndpoint{Endpoint: route.Endpoint{Name: name, MaxConcurrent: max}, BaseURL: "http://127.0.0.1:1"}
	}
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3}, Route: &route.Config{}},
		watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{hep("a", 4), hep("b", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a, b := watertight.PoolOf(c, 0).MaxConnsPerHost, watertight.PoolOf(c, 1).MaxConnsPerHost; a != 4 || b != 3 {
		t.Fatalf("pools capped at %d and %d; want 4 and 3", a, b)
	}
	if err := c.Update(watertight.Config{Bulkhead: &bulkhead.Config{Limit: 5},
		Route: &route.Config{Endpoints: []route.Endpoint{{Name: "a", MaxConcurrent: 6}, {Name: "b"}}}}); err != nil {
		t.Fatal(err)
	}
	if a, b := watertight.PoolOf(c, 0).MaxConnsPerHost, watertight.PoolOf(c, 1).MaxConnsPerHost; a != 6 || b != 5 {
		t.Errorf("after the update: pools capped at %d and %d; want 6 and 5", a, b)
	}
}

// TestPipelineUpdateTellsChanges checks that OnUpdate hears each applied
// update with what changed, by JSON path, and nothing of a refused one or
// of one that changed nothing.
func TestPipelineUpdateTellsChanges(t *testing.T) {
	var told [][]watertight.Change
	p := mustPipeline(t, watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10, MaxWait: time.Second},
		Retry:    &retry.Config{MaxAttempts: 3},
		OnUpdate: func(name string, changes []watertight.Change) {
			if name != "chat" {
				t.Errorf("OnUpdate told pipeline %q; want chat", name)
			}
			told = append(told, changes)
		},
	})
	next := watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3, MaxWait: time.Second}, Retry: &retry.Config{}}
	if err := p.Update(next); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(next); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(watertight.Config{Bulkhead: &bulkhead.Config{}, Retry: &retry.Config{}}); err == nil {
		t.Fatal("an invalid update was applied")
	}
	want := []watertight.Change{
		{Path: "bulkhead.limit", Old: "10", New: "3"},
		{Path: "retry.max_attempts", Old: "3", New: ""},
	}
	if len(told) != 1 || !reflect.DeepEqual(told[0], want) {
		t.Errorf("OnUpdate heard %v; want one update, %v", told, want)
	}
}

// TestPipelineUpdateAllOrNothing checks that what a policy's own Update
// refuses (a route's endpoints renamed, a breaker's slow rule or a fair
// share turned on) is refused before any policy changes.
func TestPipelineUpdateAllOrNothing(t *testing.T) {
	two := func(second string) *route.Config {
		return &route.Config{Endpoints: []route.Endpoint{{Name: "a"}, {Name: second}}}
	}
	p := mustPipeline(t, watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10},
		Retry:    &retry.Config{MaxAttempts: 3},
		Breaker:  &breaker.Config{},
		Route:    two("b"),
	})
	for name, cfg := range map[string]watertight.Config{
		"endpoint renamed": {Bulkhead: &bulkhead.Config{Limit: 3}, Retry: &retry.Config{MaxAttempts: 1}, Breaker: &breaker.Config{}, Route: two("c")},
		"slow rule on": {Bulkhead: &bulkhead.Config{Limit: 3}, Retry: &retry.Config{MaxAttempts: 1},
			Breaker: &breaker.Config{SlowCallRatio: 0.5, SlowCallDuration: time.Second}, Route: two("b")},
		"fair share on": {Bulkhead: &bulkhead.Config{Limit: 3, FairShare: true}, Retry: &retry.Config{MaxAttempts: 1},
			Breaker: &breaker.Config{}, Route: two("b")},
	} {
		if err := p.Update(cfg); err == nil {
			t.Errorf("%s: the update was applied", name)
		}
		if p.Bulkhead().Limit() != 10 || p.Config().Bulkhead.Limit != 10 {
			t.Errorf("%s: a refused update changed the bulkhead: limit %d, Config %d; want 10", name, p.Bulkhead().Limit(), p.Config().Bulkhead.Limit)
		}
	}
}

// TestPipelineUpdateKeepsNames checks that an update keeps the names New
// was given, in the policies and in Config, and tells no change of them.
func TestPipelineUpdateKeepsNames(t *testing.T) {
	told := 0
	p := mustPipeline(t, watertight.Config{
		Bulkhead: &bulkhead.Config{Name: "slots", Limit: 10},
		OnUpdate: func(string, []watertight.Change) { told++ },
	})
	if err := p.Update(watertight.Config{Bulkhead: &bulkhead.Config{Name: "other", Limit: 10}}); err != nil {
		t.Fatal(err)
	}
	if told != 0 || p.Config().Bulkhead.Name != "slots" || p.Bulkhead().Config().Name != "slots" {
		t.Errorf("after an update naming the bulkhead other: %d changes told, Config name %q, bulkhead's %q; want none, slots, slots",
			told, p.Config().Bulkhead.Name, p.Bulkhead().Config().Name)
	}
}

// TestNewRefusesAnAttemptSectionLongerThanTheDeadline checks the section
// even when every endpoint holds its own Attempt, so that no section New
// takes fails to read back from JSON.
func TestNewRefusesAnAttemptSectionLongerThanTheDeadline(t *testing.T) {
	own, err := deadline.New(deadline.Config{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = watertight.New("x", watertight.Config{
		Deadline: &deadline.Config{Timeout: 2 * time.Second},
		Attempt:  &deadline.Config{Timeout: 5 * time.Second},
		Route:    &route.Config{Endpoints: []route.Endpoint{{Name: "a", Attempt: own}, {Name: "b", Attempt: own}}},
	})
	if err == nil || !strings.Contains(err.Error(), "Attempt: Timeout 5s is longer than the Deadline's Timeout 2s") {
		t.Errorf("New = %v; want the Attempt section refused", err)
	}
}

// TestClientUpdateFromJSON checks that a routed client updates from a
// JSON document whose route names no endpoints: it keeps its own.
func TestClientUpdateFromJSON(t *testing.T) {
	c, err := watertight.NewHTTPClient("api", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 3}, Route: &route.Config{}},
		watertight.HTTPOptions{Endpoints: []watertight.HTTPEndpoint{
			{Endpoint: route.Endpoint{Name: "a"}, BaseURL: "http://127.0.0.1:1"},
			{Endpoint: route.Endpoint{Name: "b"}, BaseURL: "http://127.0.0.1:2"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var cfg watertight.Config
	if err := json.Unmarshal([]byte(`{"bulkhead": {"limit": 4}, "route": {"decay": "5s"}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if rc := c.Pipeline.Router().Config(); rc.Decay != 5*time.Second || len(rc.Endpoints) != 2 || watertight.PoolOf(c, 0).MaxConnsPerHost != 4 {
		t.Errorf("router %+v, pool cap %d; want decay 5s, the 2 endpoints, cap 4", rc, watertight.PoolOf(c, 0).MaxConnsPerHost)
	}
}

// TestPipelineConfigKeepsWhatIsNotData checks that after an update from
// JSON, Config still holds the hooks and the Budget in force.
func TestPipelineConfigKeepsWhatIsNotData(t *testing.T) {
	budget, err := retry.NewBudget(retry.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustPipeline(t, watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 10, OnReject: func(context.Context, *policy.RejectedError) {}},
		Retry:    &retry.Config{Budget: budget},
	})
	var cfg watertight.Config
	if err := json.Unmarshal([]byte(`{"bulkhead": {"limit": 3}, "retry": {"max_attempts": 2}}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	got := p.Config()
	if got.Bulkhead.Limit != 3 || got.Bulkhead.OnReject == nil || got.Retry.MaxAttempts != 2 || got.Retry.Budget != budget {
		t.Errorf("Config after a JSON update: %+v %+v; want the new limits with the hook and the Budget in force", *got.Bulkhead, *got.Retry)
	}
}
