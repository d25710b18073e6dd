package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// receiver is an in-process OTLP/HTTP trace receiver: it accepts POST
// /v1/traces with a protobuf ExportTraceServiceRequest, as a collector does.
type receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	requests int
	spans    []*tracepb.Span
	service  []string // service.name of each ResourceSpans
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serveHTTP))
	t.Cleanup(rc.srv.Close) // also closes the exporter's keep-alive connections
	return rc
}

func (rc *receiver) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.requests++
	for _, rs := range req.GetResourceSpans() {
		rc.service = append(rc.service, attrString(rs.GetResource().GetAttributes(), "service.name"))
		for _, ss := range rs.GetScopeSpans() {
			rc.spans = append(rc.spans, ss.GetSpans()...)
		}
	}
	rc.mu.Unlock()
	resp, err := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

func (rc *receiver) received() (spans []*tracepb.Span, services []string, requests int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.spans), slices.Clone(rc.service), rc.requests
}

// attrString returns the string value of key in kvs, or "" if absent.
func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func attrInt(kvs []*commonpb.KeyValue, key string) (int64, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue(), true
		}
	}
	return 0, false
}

// attrMap renders kvs as key=value strings, for comparison and messages.
func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		default:
			m[kv.GetKey()] = fmt.Sprint(v.GetIntValue())
		}
	}
	return m
}

// useOTLPReceiver points the OTLP exporter at rc through the standard
// environment variable, as a user would point it at a collector.
func useOTLPReceiver(t *testing.T, rc *receiver) {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rc.srv.URL) // http:// means insecure
	// The traces-specific variable would win over the generic one: make
	// sure the environment the test runs in does not set it.
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	os.Unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	t.Setenv("OTEL_SERVICE_NAME", "")
	os.Unsetenv("OTEL_SERVICE_NAME")
}

// scrapeURL GETs url with a client of its own, closed before it returns.
func scrapeURL(t *testing.T, url string) string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body)
}

// sample is one Prometheus sample: its labels as sorted name=value pairs,
// and its value.
type sample struct {
	labels string
	value  float64
}

// samples parses a text exposition into family name -> samples. It fails
// the test on a label with an empty value or an otel_scope_* label, which
// Setup's exporter must not write.
func samples(t *testing.T, text string) map[string][]sample {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, text)
	}
	out := make(map[string][]sample)
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				if l.GetValue() == "" || strings.HasPrefix(l.GetName(), "otel_scope_") {
					t.Errorf("%s has the label %s=%q", name, l.GetName(), l.GetValue())
				}
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[name] = append(out[name], sample{strings.Join(ls, ","), value(f.GetType(), m)})
		}
	}
	return out
}

// value is a sample's value; for a histogram, its count.
func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}

func TestStormExportsMetricsAndSpans(t *testing.T) {
	rc := newReceiver(t)
	useOTLPReceiver(t, rc)
	ctx := t.Context()

	tel, shutdown, err := Setup(ctx, SetupConfig{ServiceName: "storm-test"})
	if err != nil {
		t.Fatal(err)
	}
	shutDown := false
	t.Cleanup(func() {
		if !shutDown {
			shutdown(context.Background())
		}
	})
	if !tel.OTLP {
		t.Fatal("OTLP exporter off with OTEL_EXPORTER_OTLP_ENDPOINT set")
	}
	prom := httptest.NewServer(tel.Handler)
	defer prom.Close()

	storm, err := RunStorm(ctx, tel.TracerProvider, tel.MeterProvider, StormConfig{}, t.Output())
	defer storm.Close()
	if err != nil {
		t.Fatal(err)
	}
	if storm.StormRejected == 0 || storm.StormOK+storm.StormRejected != storm.StormCalls {
		t.Fatalf("bulkhead phase: %d ok + %d rejected of %d calls; want some rejected and none lost",
			storm.StormOK, storm.StormRejected, storm.StormCalls)
	}

	t.Run("prometheus", func(t *testing.T) {
		text := scrapeURL(t, prom.URL)
		// The exact line, as a dashboard or alert would match it.
		wantLine := fmt.Sprintf(`watertight_rejections_total{watertight_policy_kind="bulkhead",watertight_policy_name="storm",watertight_rejection_reason="full"} %d`, storm.StormRejected)
		if !slices.Contains(strings.Split(text, "\n"), wantLine) {
			t.Errorf("scrape lacks the line\n%s\nscrape:\n%s", wantLine, grepWatertight(text))
		}

		got := samples(t, text)
		tests := []struct {
			family, labels string
			want           int
		}{
			{"watertight_rejections_total", "watertight_policy_kind=bulkhead,watertight_policy_name=storm,watertight_rejection_reason=full", storm.StormRejected},
			{"watertight_rejections_total", "watertight_policy_kind=breaker,watertight_policy_name=down,watertight_rejection_reason=open", storm.DownRejected},
			{"watertight_rejections_total", "watertight_policy_kind=bulkhead,watertight_policy_name=shed,watertight_priority=sheddable,watertight_rejection_reason=shed", storm.ShedRejected},
			{"watertight_retry_attempts_total", "watertight_policy_kind=retry,watertight_policy_name=flaky", storm.FlakyRetries},
			{"watertight_retry_attempts_total", "watertight_policy_kind=retry,watertight_policy_name=slow", storm.SlowTimeouts - 1},
			{"watertight_retry_attempts_total", "watertight_policy_kind=retry,watertight_policy_name=down", storm.DownAttempts - 1},
			{"watertight_retry_exhausted_total", "watertight_policy_kind=retry,watertight_policy_name=slow", storm.SlowExhausted},
			{"watertight_retry_exhausted_total", "watertight_policy_kind=retry,watertight_policy_name=down", storm.DownExhausted},
			{"watertight_timeouts_total", "watertight_policy_kind=deadline,watertight_policy_name=slow-attempt", storm.SlowTimeouts},
			{"watertight_breaker_slow_total", "watertight_policy_kind=breaker,watertight_policy_name=slow", storm.SlowTimeouts},
			{"watertight_breaker_state", "watertight_breaker_state=closed,watertight_policy_kind=breaker,watertight_policy_name=slow", 1},
			{"watertight_breaker_transitions_total", "watertight_breaker_from=closed,watertight_breaker_state=open,watertight_policy_kind=breaker,watertight_policy_name=down", 1},
			{"watertight_breaker_state", "watertight_breaker_state=open,watertight_policy_kind=breaker,watertight_policy_name=down", 1},
			{"watertight_breaker_state", "watertight_breaker_state=half_open,watertight_policy_kind=breaker,watertight_policy_name=down", 0},
			{"watertight_breaker_state", "watertight_breaker_state=closed,watertight_policy_kind=breaker,watertight_policy_name=down", 0},
			{"watertight_bulkhead_active", "watertight_policy_kind=bulkhead,watertight_policy_name=storm", 0},
			{"watertight_bulkhead_queued", "watertight_policy_kind=bulkhead,watertight_policy_name=storm", 0},
			{"watertight_call_duration_seconds", "watertight_pipeline_name=storm", storm.StormOK},
			{"watertight_call_duration_seconds", "error_type=rejected,watertight_pipeline_name=storm", storm.StormRejected},
			{"watertight_call_duration_seconds", "watertight_pipeline_name=flaky", storm.FlakyOK},
			{"watertight_call_duration_seconds", "error_type=retry_exhausted,watertight_pipeline_name=slow", storm.SlowExhausted},
			{"watertight_call_duration_seconds", "error_type=retry_exhausted,watertight_pipeline_name=down", storm.DownExhausted},
			{"watertight_call_duration_seconds", "error_type=rejected,watertight_pipeline_name=down", storm.DownRejected},
			{"watertight_call_duration_seconds", "watertight_pipeline_name=routed", storm.RoutedCalls},
			{"watertight_route_picks_total", "watertight_policy_kind=route,watertight_policy_name=routed,watertight_route_endpoint=eu", storm.RoutedEU},
			{"watertight_route_picks_total", "watertight_policy_kind=route,watertight_policy_name=routed,watertight_route_endpoint=us", storm.RoutedUS},
			{"watertight_route_ejections_total", "watertight_policy_kind=route,watertight_policy_name=routed,watertight_route_endpoint=eu", storm.RoutedEjections},
			{"watertight_route_returns_total", "watertight_policy_kind=route,watertight_policy_name=routed,watertight_route_endpoint=eu", storm.RoutedReturns},
		}
		for _, tt := range tests {
			i := slices.IndexFunc(got[tt.family], func(s sample) bool { return withoutLabels(s.labels, optionalLabels...) == tt.labels })
			if i < 0 {
				t.Errorf("%s{%s}: missing; family holds %v", tt.family, tt.labels, got[tt.family])
				continue
			}
			if v := got[tt.family][i].value; v != float64(tt.want) {
				t.Errorf("%s{%s} = %v, want %d", tt.family, tt.labels, v, tt.want)
			}
		}
		// Nothing else was rejected, timed out or counted.
		for family, want := range map[string]int{
			"watertight_rejections_total":          3,
			"watertight_timeouts_total":            1,
			"watertight_retry_exhausted_total":     2,
			"watertight_call_duration_seconds":     7,
			"watertight_route_picks_total":         2,
			"watertight_route_ejections_total":     1,
			"watertight_route_returns_total":       1,
			"watertight_route_load_seconds":        2,
			"watertight_breaker_state":             6,
			"watertight_breaker_slow_total":        1,
			"watertight_breaker_transitions_total": 1,
		} {
			if n := len(got[family]); n != want {
				t.Errorf("%s has %d series, want %d: %v", family, n, want, got[family])
			}
		}
	})

	t.Run("otlp", func(t *testing.T) {
		// The batch span processor holds spans for up to 5 s: flush them.
		if err := tel.TracerProvider.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
		spans, services, requests := rc.received()
		if requests == 0 {
			t.Fatal("the receiver got no request")
		}
		for _, s := range services {
			if s != "storm-test" {
				t.Errorf("service.name = %q, want storm-test", s)
			}
		}
		checkSpans(t, spans, storm)
	})

	shutDown = true
	if err := shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// checkSpans checks the spans a receiver got against what the storm's
// callers saw.
func checkSpans(t *testing.T, spans []*tracepb.Span, s Storm) {
	t.Helper()
	byID := make(map[string]*tracepb.Span, len(spans))
	count := make(map[string]int)
	for _, sp := range spans {
		byID[string(sp.GetSpanId())] = sp
		count[sp.GetName()]++
	}
	wantCount := map[string]int{
		"watertight storm":         s.StormCalls,
		"watertight flaky":         s.FlakyCalls,
		"watertight flaky attempt": s.FlakyCalls + s.FlakyRetries,
		"watertight slow":          s.SlowCalls,
		"watertight slow attempt":  s.SlowTimeouts,
		"watertight down":          s.DownCalls,
		"watertight down attempt":  s.DownAttempts + s.DownRejected,
		"watertight routed":        s.RoutedCalls,
	}
	total := 0
	for name, want := range wantCount {
		total += want
		if count[name] != want {
			t.Errorf("%d spans named %q, want %d", count[name], name, want)
		}
	}
	if len(spans) != total {
		t.Errorf("%d spans in all, want %d: %v", len(spans), total, count)
	}

	type eventKey struct{ span, event, attrs string }
	events := make(map[eventKey]int)
	for _, sp := range spans {
		name := sp.GetName()
		if pipeline, ok := strings.CutSuffix(name, " attempt"); ok {
			// An attempt span is the child of its call's pipeline span, and
			// carries its number.
			parent := byID[string(sp.GetParentSpanId())]
			if parent == nil || parent.GetName() != pipeline || !bytes.Equal(parent.GetTraceId(), sp.GetTraceId()) {
				t.Errorf("%q span's parent is %v, want a %q span of the same trace", name, parent.GetName(), pipeline)
			}
			if n, ok := attrInt(sp.GetAttributes(), "watertight.retry.attempt"); !ok || n < 1 {
				t.Errorf("%q span has watertight.retry.attempt %d (present %v), want >= 1", name, n, ok)
			}
		} else {
			if len(sp.GetParentSpanId()) != 0 {
				t.Errorf("%q span has a parent; the storm's calls start none", name)
			}
			want := strings.TrimPrefix(name, "watertight ")
			if got := attrString(sp.GetAttributes(), "watertight.pipeline.name"); got != want {
				t.Errorf("%q span has watertight.pipeline.name %q, want %q", name, got, want)
			}
		}
		for _, ev := range sp.GetEvents() {
			a := attrMap(ev.GetAttributes())
			delete(a, "watertight.retry.wait") // a duration, checked below
			keys := make([]string, 0, len(a))
			for k, v := range a {
				keys = append(keys, k+"="+v)
			}
			sort.Strings(keys)
			events[eventKey{name, ev.GetName(), strings.Join(keys, ",")}]++
		}
		// A rejected call's span says so in its status and error.type.
		if slices.ContainsFunc(sp.GetEvents(), func(e *tracepb.Span_Event) bool { return e.GetName() == "watertight.rejected" }) {
			if sp.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || attrString(sp.GetAttributes(), "error.type") != "rejected" {
				t.Errorf("%q span with a rejection: status %v, error.type %q; want Error, rejected",
					name, sp.GetStatus().GetCode(), attrString(sp.GetAttributes(), "error.type"))
			}
		}
	}

	attempts := func(pipeline string) map[int64]int {
		m := make(map[int64]int)
		for _, sp := range spans {
			if sp.GetName() == "watertight "+pipeline+" attempt" {
				n, _ := attrInt(sp.GetAttributes(), "watertight.retry.attempt")
				m[n]++
			}
		}
		return m
	}
	if got, want := attempts("flaky"), map[int64]int{1: s.FlakyCalls, 2: s.FlakyRetries}; !mapsEqual(got, want) {
		t.Errorf("flaky attempt spans by number = %v, want %v", got, want)
	}

	wantEvents := map[eventKey]int{
		{"watertight storm", "watertight.rejected",
			"watertight.policy.kind=bulkhead,watertight.policy.name=storm,watertight.rejection.reason=full"}: s.StormRejected,
		{"watertight down attempt", "watertight.rejected",
			"watertight.policy.kind=breaker,watertight.policy.name=down,watertight.rejection.reason=open"}: s.DownRejected,
		{"watertight slow attempt", "watertight.timeout",
			"watertight.policy.kind=deadline,watertight.policy.name=slow-attempt"}: s.SlowTimeouts,
		{"watertight down attempt", "watertight.breaker.transition",
			"watertight.breaker.from=closed,watertight.breaker.state=open,watertight.policy.kind=breaker,watertight.policy.name=down"}: 1,
		{"watertight flaky", "watertight.retry",
			"watertight.policy.kind=retry,watertight.policy.name=flaky,watertight.retry.attempt=2"}: s.FlakyRetries,
		{"watertight slow", "watertight.retry",
			"watertight.policy.kind=retry,watertight.policy.name=slow,watertight.retry.attempt=2"}: 1,
		{"watertight down", "watertight.retry",
			"watertight.policy.kind=retry,watertight.policy.name=down,watertight.retry.attempt=2"}: 1,
		{"watertight down", "watertight.retry",
			"watertight.policy.kind=retry,watertight.policy.name=down,watertight.retry.attempt=3"}: 1,
		{"watertight routed", "watertight.route.picked",
			"watertight.policy.kind=route,watertight.policy.name=routed,watertight.route.endpoint=eu"}: s.RoutedEU,
		{"watertight routed", "watertight.route.picked",
			"watertight.policy.kind=route,watertight.policy.name=routed,watertight.route.endpoint=us"}: s.RoutedUS,
	}
	for k, want := range wantEvents {
		if events[k] != want {
			t.Errorf("%d %s events on %q spans with {%s}, want %d", events[k], k.event, k.span, k.attrs, want)
		}
	}
	for k, n := range events {
		if _, ok := wantEvents[k]; !ok {
			t.Errorf("unexpected: %d %s events on %q spans with {%s}", n, k.event, k.span, k.attrs)
		}
	}
}

// optionalLabels are labels the checks above leave out: the retry
// package's own tests check its exhaustion reasons exactly.
var optionalLabels = []string{"watertight_retry_reason"}

// withoutLabels returns labels (sorted name=value pairs joined by commas)
// without the labels named.
func withoutLabels(labels string, names ...string) string {
	parts := strings.Split(labels, ",")
	parts = slices.DeleteFunc(parts, func(p string) bool {
		name, _, _ := strings.Cut(p, "=")
		return slices.Contains(names, name)
	})
	return strings.Join(parts, ",")
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func grepWatertight(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "watertight_") && !strings.Contains(line, "_bucket{") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestSetupWithoutEndpoint checks that no OTLP exporter is made (and so
// nothing is sent to localhost:4318) when no endpoint variable is set.
func TestSetupWithoutEndpoint(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	tel, shutdown, err := Setup(t.Context(), SetupConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if tel.OTLP {
		t.Error("OTLP exporter on with no endpoint set")
	}
}

// TestRun runs the command as `go run .` does, on an ephemeral port, and
// checks that it prints the storm and the scrape and shuts down.
func TestRun(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-addr", "127.0.0.1:0", "-spans", "stderr"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"storm: 20 calls of 50ms at once",
		`watertight_rejections_total{watertight_policy_kind="bulkhead",watertight_policy_name="storm",watertight_rejection_reason="full"} `,
		`watertight_breaker_state{watertight_breaker_state="open",watertight_policy_kind="breaker",watertight_policy_name="down"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "_bucket{") {
		t.Errorf("stdout holds histogram buckets without -buckets:\n%s", out)
	}
	// The stdout trace exporter wrote the spans, flushed before the scrape.
	if n := strings.Count(stderr.String(), `"Name":"watertight storm"`); n != 20 {
		t.Errorf("stderr holds %d storm spans, want 20", n)
	}
}

// TestRunSpansOffByDefault checks that `go run .` prints no span: they go
// to stderr or stdout only when -spans asks.
func TestRunSpansOffByDefault(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-addr", "127.0.0.1:0"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "watertight_rejections_total{") {
		t.Errorf("stdout lacks the scrape:\n%s", stdout.String())
	}
	for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if strings.Contains(out, `"SpanContext"`) || strings.Contains(out, `"Name":"watertight`) {
			t.Errorf("%s holds spans without -spans:\n%.2000s", name, out)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q, want nothing", stderr.String())
	}
}

// TestRunUsage checks -h: the usage says what the command does, that it
// has no subcommands, and lists each flag once with its default once.
func TestRunUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-h"}, &stdout, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	out := stderr.String()
	for _, want := range []string{"Usage: go run .", "no subcommands", "-addr", "-serve", "-every", "-spans", `(default "off")`, "-pretty", "-buckets"} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	for line := range strings.Lines(out) {
		if strings.Count(line, "default") > 1 {
			t.Errorf("a usage line gives its default twice: %q", line)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("-h wrote to stdout: %q", stdout.String())
	}
}

func TestRunFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-spans", "syslog"}, "-spans must be"},
		{[]string{"-every", "1s"}, "-every must be > 0 and used with -serve"},
		{[]string{"-serve", "-every", "-1s"}, "-every must be > 0"},
		{[]string{"storm"}, `unexpected argument "storm"`},
	} {
		err := run(t.Context(), tt.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// TestRunServeEvery checks that -serve -every runs the storm again while
// serving, so the counters keep rising for a Prometheus to rate, and that
// an interrupt ends the command cleanly.
func TestRunServeEvery(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stderr := &lineWatcher{want: "serving ", found: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-serve", "-every", "50ms"}, io.Discard, stderr)
	}()
	var url string
	select {
	case line := <-stderr.found:
		url = strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "serving "))[0], ";")
	case err := <-done:
		t.Fatalf("run ended before serving: %v", err)
	}
	rejected := func() float64 {
		for _, s := range samples(t, scrapeURL(t, url))["watertight_rejections_total"] {
			if strings.Contains(s.labels, "watertight_policy_name=storm") {
				return s.value
			}
		}
		return 0
	}
	first := rejected()
	// No timed assertion: the storm repeats every 50 ms, so the count
	// rises unless -every does nothing; the test's own timeout bounds it.
	for rejected() <= first {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after an interrupt: %v", err)
	}
}
