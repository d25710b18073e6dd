package watertight_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
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
)

func ok(context.Context) error { return nil }

func full() watertight.Config {
	return watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 1},
		Deadline: &deadline.Config{Timeout: 30 * time.Second},
		Retry:    &retry.Config{MaxAttempts: 2, InitialInterval: time.Millisecond},
		Breaker:  &breaker.Config{},
		Attempt:  &deadline.Config{Timeout: 10 * time.Second},
	}
}

func mustNew(t *testing.T, name string, cfg watertight.Config, opts ...compose.Option) *watertight.Pipeline {
	t.Helper()
	p, err := watertight.New(name, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestNewBuildsEverySlot(t *testing.T) {
	cfg := full()
	p := mustNew(t, "llm", cfg)
	if p.Bulkhead() == nil || p.Breaker() == nil {
		t.Fatalf("Bulkhead() = %v, Breaker() = %v; want both built", p.Bulkhead(), p.Breaker())
	}
	if p.Name() != "llm" || p.Bulkhead().Limit() != 1 {
		t.Errorf("Name = %q, Limit = %d", p.Name(), p.Bulkhead().Limit())
	}
	// The caller's sections are copied, not filled in.
	if cfg.Bulkhead.Name != "" || cfg.Breaker.Name != "" || cfg.Attempt.Name != "" || cfg.Bulkhead.MeterProvider != nil {
		t.Errorf("New modified the caller's Config: %+v %+v %+v", cfg.Bulkhead, cfg.Breaker, cfg.Attempt)
	}
	var _ policy.Policy = p // a Pipeline is a Policy
	if v, err := policy.Do(context.Background(), p, func(context.Context) (int, error) { return 7, nil }); v != 7 || err != nil {
		t.Errorf("Do = %v, %v", v, err)
	}
}

func TestSectionNamesDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := full()
		cfg.Retry.MaxAttempts = 1
		p := mustNew(t, "llm", cfg)

		// The bulkhead's rejection carries the pipeline's name.
		hold, release := make(chan struct{}), make(chan struct{})
		go p.Execute(context.Background(), func(context.Context) error { close(hold); <-release; return nil })
		<-hold
		err := p.Execute(context.Background(), ok)
		var rej *policy.RejectedError
		if !errors.As(err, &rej) || rej.Kind != bulkhead.Kind || rej.Name != "llm" {
			t.Errorf("full bulkhead: %v; want a rejection named llm", err)
		}
		close(release)
		synctest.Wait()

		// The attempt deadline is "llm.attempt".
		err = p.Execute(context.Background(), func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
		var ex *deadline.ExceededError
		if !errors.As(err, &ex) || ex.Name != "llm.attempt" || ex.Duration != 10*time.Second {
			t.Errorf("attempt timeout: %v (%+v); want an ExceededError named llm.attempt", err, ex)
		}

		// A section's own Name is kept.
		cfg.Breaker = &breaker.Config{Name: "provider"}
		q := mustNew(t, "other", cfg)
		q.Breaker().ForceOpen()
		err = q.Execute(context.Background(), ok)
		if !errors.As(err, &rej) || rej.Kind != breaker.Kind || rej.Name != "provider" {
			t.Errorf("open breaker: %v; want a rejection named provider", err)
		}
	})
}

func TestNilSectionsLeaveSlotsEmpty(t *testing.T) {
	p := mustNew(t, "empty", watertight.Config{})
	if p.Bulkhead() != nil || p.Breaker() != nil {
		t.Errorf("accessors = %v, %v; want nil", p.Bulkhead(), p.Breaker())
	}
	boom := errors.New("boom")
	n := 0
	err := p.Execute(context.Background(), func(context.Context) error { n++; return boom })
	if err != boom || n != 1 {
		t.Errorf("Execute = %v after %d calls; want fn's error, one call (no retry)", err, n)
	}
	var nilP *watertight.Pipeline
	if nilP.Close() != nil || nilP.Bulkhead() != nil || nilP.Breaker() != nil {
		t.Error("a nil Pipeline's Close or accessors misbehaved")
	}
}

func TestConfigErrors(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	tests := []struct {
		name    string
		cfg     watertight.Config
		want    string
		wrapped string // the policy's own message, reached by errors.Unwrap
	}{
		{"bulkhead", watertight.Config{Bulkhead: &bulkhead.Config{}},
			"watertight: Bulkhead: Config.Limit must be >= 1, got 0", "bulkhead: Config.Limit must be >= 1, got 0"},
		{"deadline", watertight.Config{Deadline: &deadline.Config{}},
			"watertight: Deadline: Config.Timeout must be > 0, got 0s", "deadline: Config.Timeout must be > 0, got 0s"},
		{"retry", watertight.Config{Retry: &retry.Config{MaxAttempts: -1}},
			"watertight: Retry: Config.MaxAttempts must be >= 1, got -1", "retry: Config.MaxAttempts must be >= 1, got -1"},
		{"breaker", watertight.Config{Breaker: &breaker.Config{FailureRatio: 2}},
			"watertight: Breaker: Config.FailureRatio must be in [0, 1] (0 turns the rule off), got 2",
			"breaker: Config.FailureRatio must be in [0, 1] (0 turns the rule off), got 2"},
		{"attempt", watertight.Config{Attempt: &deadline.Config{Timeout: -1}},
			"watertight: Attempt: Config.Timeout must be > 0, got -1ns", "deadline: Config.Timeout must be > 0, got -1ns"},
		{"attempt longer", watertight.Config{Deadline: &deadline.Config{Timeout: time.Second}, Attempt: &deadline.Config{Timeout: time.Minute}},
			"watertight: Attempt: Timeout 1m0s is longer than the Deadline's Timeout 1s", ""},
		{"both", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 1}, Use: compose.Policies{Bulkhead: bh}},
			"watertight: Bulkhead: both Bulkhead and Use.Bulkhead set", ""},
		{"both attempt", watertight.Config{Attempt: &deadline.Config{Timeout: 1}, Use: compose.Policies{Attempt: bh}},
			"watertight: Attempt: both Attempt and Use.Attempt set", ""},
		{"typed nil in Use", watertight.Config{Use: compose.Policies{Breaker: (*breaker.Breaker)(nil)}},
			"watertight: compose: Policies.Breaker is a nil *breaker.Breaker; leave the slot nil to skip it", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := watertight.New("llm", tt.cfg)
			if err == nil || p != nil {
				t.Fatalf("New = %v, %v; want an error", p, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q\nwant    %q", err, tt.want)
			}
			if tt.wrapped != "" {
				if u := errors.Unwrap(err); u == nil || u.Error() != tt.wrapped {
					t.Errorf("Unwrap = %v; want the policy's error %q", u, tt.wrapped)
				}
			}
		})
	}
	if _, err := watertight.New("", watertight.Config{}); err == nil || !strings.HasPrefix(err.Error(), "watertight: ") {
		t.Errorf("empty name: %v", err)
	}
}

// activeSeries returns the watertight.bulkhead.active data points collected
// from r, by policy name.
func activeSeries(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "watertight.bulkhead.active" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				name, _ := dp.Attributes.Value(attribute.Key("watertight.policy.name"))
				got[name.AsString()] = dp.Value
			}
		}
	}
	return got
}

func TestMeterProviderAndClose(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())

	// The provider given to New reaches the sections.
	p, err := watertight.New("llm", full(), compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	// A prebuilt policy in Use on the same provider: Close leaves it.
	shared, err := bulkhead.New(bulkhead.Config{Name: "shared", Limit: 1, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	q, err := watertight.New("q", watertight.Config{Use: compose.Policies{Bulkhead: shared}}, compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	if q.Bulkhead() != shared {
		t.Error("Bulkhead() does not return the bulkhead given in Use")
	}
	if got := activeSeries(t, r); len(got) != 2 || got["llm"] != 0 || got["shared"] != 0 {
		t.Fatalf("active series = %v; want llm and shared", got)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil { // again: a no-op
		t.Fatal(err)
	}
	if got := activeSeries(t, r); len(got) != 1 || got["shared"] != 0 {
		t.Errorf("after Close: active series = %v; want only shared (Use is not closed)", got)
	}
	// The Pipeline still works after Close, without its gauges.
	if err := p.Execute(context.Background(), ok); err != nil {
		t.Errorf("Execute after Close = %v", err)
	}

	// A New that fails after building the bulkhead closes it.
	cfg := full()
	cfg.Attempt = &deadline.Config{Timeout: time.Hour} // longer than the Deadline
	if _, err := watertight.New("failed", cfg, compose.WithMeterProvider(mp)); err == nil {
		t.Fatal("New succeeded")
	}
	if got := activeSeries(t, r); got["failed"] != 0 || len(got) != 1 {
		t.Errorf("after a failed New: active series = %v; want the bulkhead it built unregistered", got)
	}
}

func TestNewHTTPClient(t *testing.T) {
	c, err := watertight.NewHTTPClient("api", watertight.Config{
		Bulkhead: &bulkhead.Config{Limit: 3},
	}, watertight.HTTPOptions{RetryUnsafe: true, IsFailure: func(*http.Response) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr, isHT := c.Client.Transport.(*httppolicy.Transport)
	if !isHT {
		t.Fatalf("Transport is %T", c.Client.Transport)
	}
	base := watertight.PoolOf(c, 0)
	if base == nil || base.MaxConnsPerHost != 3 || base.MaxIdleConnsPerHost != 3 {
		t.Errorf("Base = %#v; want a transport capped at the bulkhead's 3", tr.Base)
	}
	if tr.Policy != c.Pipeline || !tr.RetryUnsafe || tr.IsFailure == nil || c.Client.Timeout != 0 {
		t.Errorf("Transport = %+v; want the pipeline and the HTTPOptions", tr)
	}
	if base == http.DefaultTransport {
		t.Error("the client shares http.DefaultTransport")
	}

	// Without a bulkhead: no cap on connections.
	d, err := watertight.NewHTTPClient("free", watertight.Config{}, watertight.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b := watertight.PoolOf(d, 0); b.MaxConnsPerHost != 0 {
		t.Errorf("MaxConnsPerHost = %d without a bulkhead; want 0 (no cap)", b.MaxConnsPerHost)
	}

	// Errors are New's.
	if _, err := watertight.NewHTTPClient("bad", watertight.Config{Bulkhead: &bulkhead.Config{}}, watertight.HTTPOptions{}); err == nil ||
		err.Error() != "watertight: Bulkhead: Config.Limit must be >= 1, got 0" {
		t.Errorf("NewHTTPClient error = %v", err)
	}
	var nilC *watertight.Client
	if nilC.Close() != nil {
		t.Error("nil Client's Close failed")
	}
}

func TestAdaptiveSection(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	defer mp.Shutdown(context.Background())
	cfg := watertight.Config{Adaptive: &adaptive.Config{MaxLimit: 8}, Retry: &retry.Config{}}
	p, err := watertight.New("llm", cfg, compose.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	if p.Limiter() == nil || p.Bulkhead() != nil || cfg.Adaptive.Name != "" {
		t.Fatalf("Limiter() = %v, Bulkhead() = %v, section Name %q", p.Limiter(), p.Bulkhead(), cfg.Adaptive.Name)
	}
	if err := p.Execute(context.Background(), ok); err != nil {
		t.Fatal(err)
	}
	if got := activeSeries(t, r); len(got) != 1 || got["llm"] != 0 {
		t.Errorf("active series = %v; want the limiter's, named llm", got)
	}
	p.Close()
	if got := activeSeries(t, r); len(got) != 0 {
		t.Errorf("after Close: active series = %v; want none", got)
	}

	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	for _, tt := range []struct {
		cfg  watertight.Config
		want string
	}{
		{watertight.Config{Adaptive: &adaptive.Config{}, Bulkhead: &bulkhead.Config{Limit: 1}},
			"watertight: Adaptive: both Bulkhead and Adaptive set (they take the same slot)"},
		{watertight.Config{Adaptive: &adaptive.Config{}, Use: compose.Policies{Bulkhead: bh}},
			"watertight: Adaptive: both Adaptive and Use.Bulkhead set (they take the same slot)"},
		{watertight.Config{Adaptive: &adaptive.Config{MinLimit: 5, MaxLimit: 3}},
			"watertight: Adaptive: Config.MaxLimit must be >= MinLimit (5), got 3"},
	} {
		if _, err := watertight.New("llm", tt.cfg); err == nil || err.Error() != tt.want {
			t.Errorf("New = %v; want %q", err, tt.want)
		}
	}

	// A Limiter given in Use is found too.
	l, err := adaptive.New(adaptive.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	q := mustNew(t, "q", watertight.Config{Use: compose.Policies{Bulkhead: l}})
	if q.Limiter() != l {
		t.Error("Limiter() does not return the limiter given in Use")
	}
}
