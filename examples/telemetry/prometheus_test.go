package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dashboardFile is the Grafana dashboard the test checks.
const dashboardFile = "grafana/watertight.json"

// requirePrometheus is the environment variable that turns a missing
// prometheus binary from a skip into a failure, for CI.
const requirePrometheus = "WATERTIGHT_REQUIRE_PROMETHEUS"

// exposedFamilies are the metric families the storm exposes, as
// Prometheus names them: the exact set, so that a renamed instrument fails
// here before it empties a dashboard panel.
var exposedFamilies = []string{
	"watertight_breaker_slow_total",
	"watertight_breaker_state",
	"watertight_breaker_transitions_total",
	"watertight_bulkhead_active",
	"watertight_bulkhead_queued",
	"watertight_call_duration_seconds",
	"watertight_rejections_total",
	"watertight_retry_attempts_total",
	"watertight_retry_exhausted_total",
	"watertight_route_ejections_total",
	"watertight_route_load_seconds",
	"watertight_route_picks_total",
	"watertight_route_returns_total",
	"watertight_timeouts_total",
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource *datasourceRef  `json:"datasource"`
	Targets    []target        `json:"targets"`
	Panels     []panel         `json:"panels"` // a collapsed row's
	GridPos    json.RawMessage `json:"gridPos"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where string // panel title and refId
	expr  string
}

func loadDashboard(t *testing.T) (dashboard, []query) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []query
	ids := make(map[int]bool)
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if len(p.GridPos) == 0 {
				t.Errorf("panel %q has no gridPos", p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" {
					t.Errorf("panel %q: a target without expr or refId: %+v", p.Title, tg)
				}
				qs = append(qs, query{p.Title + " " + tg.RefID, tg.Expr})
			}
		}
	}
	walk(d.Panels)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	return d, qs
}

// varRef matches a Grafana variable in an expression: $name, ${name} or
// ${name:format}, and the deprecated [[name]].
var varRef = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// substitute replaces every Grafana variable in expr with its value in vars,
// as Grafana does before it sends the query. An unknown variable is an
// error: it would reach Prometheus as a syntax error.
func substitute(expr string, vars map[string]string) (string, error) {
	var unknown []string
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
			return ref
		}
		return v
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("unknown variables %v in %s", unknown, expr)
	}
	return out, nil
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"__rate_interval": "5s", "pipeline": ".*"}
	got, err := substitute(`rate(x{p=~"$pipeline", q=~"${pipeline}", r=~"[[pipeline]]"}[$__rate_interval])`, vars)
	if want := `rate(x{p=~".*", q=~".*", r=~".*"}[5s])`; err != nil || got != want {
		t.Errorf("substitute = %q, %v; want %q", got, err, want)
	}
	if _, err := substitute(`rate(x[$__range])`, vars); err == nil {
		t.Error("an unknown variable was left in place")
	}
}

// TestDashboardJSON checks the dashboard without Prometheus: it parses, its
// panels are well formed, and every query names a metric the storm exposes.
func TestDashboardJSON(t *testing.T) {
	d, qs := loadDashboard(t)
	vars := dashboardVars(t, d, "5s")
	names := regexp.MustCompile(`\bwatertight_\w+`)
	exposed := make(map[string]bool)
	for _, f := range exposedFamilies {
		exposed[f] = true
		if strings.HasSuffix(f, "_seconds") {
			for _, s := range []string{"_bucket", "_count", "_sum"} {
				exposed[f+s] = true
			}
		}
	}
	used := make(map[string]bool)
	for _, q := range qs {
		if _, err := substitute(q.expr, vars); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		for _, n := range names.FindAllString(q.expr, -1) {
			// Label names share the prefix; metric names are followed by
			// a selector, a range or the end of an argument.
			if !exposed[n] && !isLabel(n) {
				t.Errorf("%s: %s is neither an exposed metric nor a watertight label", q.where, n)
			}
			used[strings.TrimSuffix(strings.TrimSuffix(n, "_count"), "_bucket")] = true
		}
	}
	for _, f := range exposedFamilies {
		if !used[f] {
			t.Errorf("no panel shows %s", f)
		}
	}
}

// isLabel reports whether n is one of the watertight attributes as a
// Prometheus label.
func isLabel(n string) bool {
	switch n {
	case "watertight_policy_kind", "watertight_policy_name", "watertight_rejection_reason",
		"watertight_pipeline_name", "watertight_breaker_state", "watertight_breaker_from",
		"watertight_retry_reason", "watertight_priority", "watertight_route_endpoint":
		return true
	}
	return false
}

// dashboardVars returns the values the test gives the dashboard's
// variables: rateInterval for $__rate_interval and each query variable's
// "All" value, as Grafana sends them with All selected.
func dashboardVars(t *testing.T, d dashboard, rateInterval string) map[string]string {
	t.Helper()
	vars := map[string]string{"__rate_interval": rateInterval}
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
		case "query":
			if !v.IncludeAll || v.AllValue == "" {
				t.Errorf("variable %s: want includeAll with an allValue, got %+v", v.Name, v)
			}
			vars[v.Name] = v.AllValue
		default:
			t.Errorf("variable %s: type %q not handled by the test", v.Name, v.Type)
		}
	}
	return vars
}

// TestDashboardAgainstPrometheus runs a real Prometheus against the
// command's /metrics while the storm repeats, then sends every query of the
// dashboard to Prometheus's HTTP API, its Grafana variables substituted:
// each must return at least one series. It skips when no prometheus binary
// is installed, unless WATERTIGHT_REQUIRE_PROMETHEUS=1.
func TestDashboardAgainstPrometheus(t *testing.T) {
	bin := findPrometheus(t)
	d, qs := loadDashboard(t)
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}

	// The command as a user runs it for a Prometheus to watch.
	ctx, cancel := context.WithCancel(t.Context())
	stderr := &lineWatcher{want: "serving ", found: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-serve", "-every", "500ms"}, io.Discard, stderr)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var metricsURL string
	select {
	case line := <-stderr.found:
		metricsURL = strings.Fields(strings.TrimPrefix(line, "serving "))[0]
		metricsURL = strings.TrimSuffix(metricsURL, ";")
	case err := <-done:
		done <- err
		t.Fatalf("run ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("run did not start serving within 30s")
	}
	target, err := url.Parse(metricsURL)
	if err != nil {
		t.Fatal(err)
	}

	api := startPrometheus(t, bin, rulesPath(t), target.Host, startAlertSources(t))
	defer api.close()

	t.Run("names", func(t *testing.T) {
		text := scrapeURL(t, metricsURL)
		var got []string
		for name := range samples(t, text) {
			if strings.HasPrefix(name, "watertight_") {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, exposedFamilies) {
			t.Errorf("exposed families = %v, want %v", got, exposedFamilies)
		}
	})

	// Wait for scrapes: until every query returns a series, or 40 s.
	vars := dashboardVars(t, d, "5s")
	var failures, counts []string
	start := time.Now()
	deadline := start.Add(40 * time.Second)
	for {
		failures, counts = failures[:0], counts[:0]
		for _, q := range qs {
			expr, err := substitute(q.expr, vars)
			if err != nil {
				t.Fatal(err)
			}
			n, err := api.count(expr)
			switch {
			case err != nil:
				failures = append(failures, fmt.Sprintf("%s: %s: %v", q.where, expr, err))
			case n == 0:
				failures = append(failures, fmt.Sprintf("%s: %s: no series", q.where, expr))
			}
			counts = append(counts, fmt.Sprintf("%s: %d series", q.where, n))
		}
		if len(failures) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("after %v of scrapes:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(counts, "\n"))

	t.Run("variables", func(t *testing.T) {
		// Each variable query lists values, and each query is valid PromQL
		// with one of them selected rather than All.
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			values, err := api.labelValues(v.Definition)
			if err != nil || len(values) == 0 {
				t.Errorf("variable %s (%s): values %v, %v", v.Name, v.Definition, values, err)
				continue
			}
			one := maps.Clone(vars)
			one[v.Name] = regexp.QuoteMeta(values[0])
			for _, q := range qs {
				expr, _ := substitute(q.expr, one)
				if _, err := api.count(expr); err != nil {
					t.Errorf("%s with %s=%s: %v", q.where, v.Name, values[0], err)
				}
			}
		}
	})

	t.Run("alerts", func(t *testing.T) { checkRules(t, api) })

	t.Run("labels", func(t *testing.T) {
		// No otel_scope_* label reached Prometheus, and the breaker state
		// set has its three states.
		var labels []string
		if err := api.get("/api/v1/labels", nil, &labels); err != nil {
			t.Fatal(err)
		}
		for _, l := range labels {
			if strings.HasPrefix(l, "otel_scope_") {
				t.Errorf("Prometheus holds the label %s", l)
			}
		}
		states, err := api.labelValues(`label_values(watertight_breaker_state, watertight_breaker_state)`)
		if slices.Sort(states); err != nil || !slices.Equal(states, []string{"closed", "half_open", "open"}) {
			t.Errorf("breaker states = %v, %v; want closed, half_open, open", states, err)
		}
	})
}

// findPrometheus returns the prometheus binary's path, or skips the test
// (fails it if WATERTIGHT_REQUIRE_PROMETHEUS=1).
func findPrometheus(t *testing.T) string {
	t.Helper()
	return findTool(t, "prometheus", "the dashboard's queries and the alerting rules were not run against Prometheus")
}

// findTool returns the path of name, a program of Debian's prometheus
// package, or skips the test, saying what was not done (fails it if
// WATERTIGHT_REQUIRE_PROMETHEUS=1).
func findTool(t *testing.T, name, notDone string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		msg := "no " + name + " on PATH (Debian/Ubuntu: apt-get install prometheus): " + notDone
		if os.Getenv(requirePrometheus) == "1" {
			t.Fatalf("%s, and %s=1", msg, requirePrometheus)
		}
		t.Skip(msg)
	}
	return bin
}

// lineWatcher is an io.Writer that sends the first line holding want on
// found. It is safe for concurrent use.
type lineWatcher struct {
	want  string
	found chan string

	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		for line := range strings.Lines(w.buf.String()) {
			if strings.Contains(line, w.want) && strings.HasSuffix(line, "\n") {
				w.found <- strings.TrimSpace(line)
				w.sent = true
				break
			}
		}
	}
	return len(p), nil
}

// promAPI is a running Prometheus and a client of its HTTP API.
type promAPI struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	client *http.Client
	tr     *http.Transport
	log    string // its log file
	// waited receives cmd.Wait's result once the process has exited.
	waited <-chan error
}

// startPrometheus starts bin on a free loopback port, scraping the targets'
// /metrics every second into a temporary storage directory and evaluating
// the rules file rules every second, and waits until it is ready.
func startPrometheus(t *testing.T, bin, rules string, targets ...string) *promAPI {
	t.Helper()
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: watertight-telemetry
    metrics_path: /metrics
    static_configs:
      - targets: [%s]
`, rules, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	api := &promAPI{t: t, client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr: tr,
		log: filepath.Join(dir, "prometheus.log")}

	// The port is free when chosen; another process could take it before
	// Prometheus binds it, so try a few.
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if err := api.start(bin, cfgPath, filepath.Join(dir, "data"), addr); err == nil {
			return api
		} else if try == 2 {
			t.Fatal(err)
		}
	}
}

// start runs Prometheus on addr and waits until /-/ready answers 200 or it
// exits.
func (a *promAPI) start(bin, cfgPath, dataDir, addr string) error {
	logf, err := os.Create(a.log)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+dataDir,
		"--storage.tsdb.retention.time=1h",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	// A file, not a buffer: exec copies to a buffer in a goroutine of its
	// own, which would outlive a test that fails before Wait.
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	a.cmd, a.base = cmd, "http://"+addr
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			a.cmd = nil
			return fmt.Errorf("prometheus exited: %v\n%s", err, a.logTail())
		default:
		}
		if resp, err := a.client.Get(a.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				a.waited = exited
				return nil
			}
		}
		if time.Now().After(deadline) {
			a.stop(exited)
			return fmt.Errorf("prometheus not ready within 30s\n%s", a.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *promAPI) logTail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// stop sends SIGTERM to Prometheus by its PID and waits for it, killing it
// if it has not exited within 10 s.
func (a *promAPI) stop(exited <-chan error) {
	if a.cmd == nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		a.t.Errorf("prometheus (pid %d) did not stop on SIGTERM within 10s; killing it", a.cmd.Process.Pid)
		a.cmd.Process.Kill()
		<-exited
	}
	a.cmd = nil
}

func (a *promAPI) close() {
	a.stop(a.waited)
	a.tr.CloseIdleConnections()
}

// get GETs path with params from the API and decodes its data into out.
func (a *promAPI) get(path string, params url.Values, out any) error {
	u := a.base + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	resp, err := a.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, resp.Status, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// count runs expr as an instant query and returns how many series it gave.
func (a *promAPI) count(expr string) (int, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := a.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return 0, err
	}
	if data.ResultType != "vector" && data.ResultType != "matrix" {
		return 0, fmt.Errorf("result type %s, want a vector", data.ResultType)
	}
	return len(data.Result), nil
}

// labelValuesQuery matches Grafana's label_values(selector, label).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// labelValues answers a Grafana label_values(selector, label) variable
// query as Grafana's Prometheus data source does, with the label values
// API.
func (a *promAPI) labelValues(def string) ([]string, error) {
	m := labelValuesQuery.FindStringSubmatch(strings.TrimSpace(def))
	if m == nil {
		return nil, errors.New("not a label_values(selector, label) query")
	}
	var values []string
	err := a.get("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {m[1]}}, &values)
	return values, err
}

// TestPrometheusStartFails checks that a Prometheus that exits at once (a
// bad flag, a port taken) is reported with its log rather than waited on.
func TestPrometheusStartFails(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "prometheus")
	if err := os.WriteFile(fake, []byte("#!"+sh+"\necho 'err=\"bind: address already in use\"' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	a := &promAPI{t: t, client: &http.Client{Transport: tr}, tr: tr, log: filepath.Join(dir, "log")}
	err = a.start(fake, filepath.Join(dir, "cfg.yml"), filepath.Join(dir, "data"), "127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("start = %v, want an exit error with the log", err)
	}
	if a.cmd != nil {
		t.Error("a process that exited is still recorded as running")
	}
}
