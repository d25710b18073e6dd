package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/bulkhead"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/deadline"
	"github.com/watertight/watertight/keyed"
	"github.com/watertight/watertight/policy"
	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/retry"
	"github.com/watertight/watertight/route"
	"github.com/watertight/watertight/statuspage"
)

func newPipeline(t *testing.T, name string, cfg watertight.Config) *watertight.Pipeline {
	t.Helper()
	p, err := watertight.New(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newPage(t *testing.T, opts statuspage.Options) *statuspage.Page {
	t.Helper()
	pg, err := statuspage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return pg
}

// get serves a GET of target and returns the answer's status and body.
func get(pg http.Handler, method, target string) (int, string) {
	w := httptest.NewRecorder()
	pg.ServeHTTP(w, httptest.NewRequest(method, target, nil))
	return w.Code, w.Body.String()
}

func stateOf(t *testing.T, pg http.Handler) statuspage.State {
	t.Helper()
	code, body := get(pg, http.MethodGet, "/?format=json")
	var st statuspage.State
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("JSON view: %d %v: %s", code, err, body)
	}
	return st
}

var errDown = errors.New("down")

// TestPageShowsState checks the page's JSON and HTML views of a pipeline
// whose bulkhead is full with waiters of two priorities, whose breaker is
// open and whose rate limit holds, and of a routed pipeline.
func TestPageShowsState(t *testing.T) {
	budget, err := retry.NewBudget(retry.BudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	chat := newPipeline(t, "chat", watertight.Config{
		Bulkhead:  &bulkhead.Config{Limit: 1, MaxQueue: 4},
		Deadline:  &deadline.Config{Timeout: time.Minute},
		Retry:     &retry.Config{MaxAttempts: 1, Budget: budget},
		RateLimit: &ratelimit.Config{},
		Breaker:   &breaker.Config{ConsecutiveFailures: 2, OpenTimeout: time.Hour},
	})
	routed := newPipeline(t, "routed", watertight.Config{Breaker: &breaker.Config{},
		Route: &route.Config{Endpoints: []route.Endpoint{{Name: "eu"}, {Name: "us"}}}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{chat, routed}})

	for range 2 {
		chat.Execute(context.Background(), func(context.Context) error { return errDown })
	}
	if err := chat.Execute(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after 2 failures: %v; want the breaker open", err)
	}
	chat.RateLimit().HoldFor(time.Hour)
	release := make(chan struct{})
	defer close(release)
	hold := func(ctx context.Context) {
		chat.Bulkhead().Execute(ctx, func(context.Context) error { <-release; return nil })
	}
	go hold(context.Background())
	for chat.Bulkhead().Active() == 0 {
		time.Sleep(time.Millisecond)
	}
	go hold(policy.WithPriority(context.Background(), policy.PriorityCritical))
	go hold(context.Background())
	for chat.Bulkhead().Queued() < 2 {
		time.Sleep(time.Millisecond)
	}

	st := stateOf(t, pg)
	if len(st.Pipelines) != 2 || st.Pipelines[0].Name != "chat" || st.Pipelines[1].Name != "routed" {
		t.Fatalf("pipelines %+v; want chat and routed, in order", st.Pipelines)
	}
	slots := map[string]statuspage.SlotState{}
	for _, s := range st.Pipelines[0].Slots {
		slots[s.Slot] = s
	}
	if b := slots["Bulkhead"].Bulkhead; b == nil || b.Limit != 1 || b.Active != 1 || b.Queued != 2 || b.QueuedBy["critical"] != 1 || b.QueuedBy["default"] != 1 {
		t.Errorf("bulkhead %+v; want limit 1, 1 active, 2 queued (1 critical, 1 default)", b)
	}
	if b := slots["Breaker"].Breaker; b == nil || b.State != "open" || b.OpenUntil == nil || time.Until(*b.OpenUntil) < 50*time.Minute {
		t.Errorf("breaker %+v; want open for about an hour", b)
	}
	if r := slots["RateLimit"].RateLimit; r == nil || r.HeldUntil == nil {
		t.Errorf("rate limit %+v; want held", r)
	}
	if r := slots["Retry"].Retry; r == nil || r.MaxAttempts != 1 || r.Budget == nil {
		t.Errorf("retry %+v; want 1 attempt and a budget", r)
	}
	if d := slots["Deadline"].Deadline; d == nil || d.Timeout != "1m0s" {
		t.Errorf("deadline %+v; want 1m0s", d)
	}
	if eps := st.Pipelines[1].Endpoints; len(eps) != 2 || eps[0].Name != "eu" || eps[1].Name != "us" ||
		len(eps[0].Slots) != 1 || eps[0].Slots[0].Breaker == nil || eps[0].Slots[0].Name != "routed.eu" {
		t.Errorf("endpoints %+v; want eu and us, each with its breaker", eps)
	}

	code, html := get(pg, http.MethodGet, "/")
	for _, want := range []string{`<section id="p-chat">`, `<span class="breaker-state open">open</span>`, "held until", "limit <b>1</b>, active <b>1</b>, queued <b>2</b>", "<td>eu</td>", "its policies", `<span class="breaker-state closed">closed</span>`, `http-equiv="refresh" content="2"`} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML (%d) lacks %q", code, want)
		}
	}
}

// TestRejectionsLastMinute checks the rejections the page samples: by
// policy and reason, second by second, and gone after a minute.
func TestRejectionsLastMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		chat := newPipeline(t, "chat", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 1}})
		pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{chat}})
		p, err := chat.Bulkhead().Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			chat.Execute(context.Background(), func(context.Context) error { return nil })
		}
		time.Sleep(time.Second)
		synctest.Wait()
		chat.Execute(context.Background(), func(context.Context) error { return nil })
		time.Sleep(time.Second)
		synctest.Wait()
		p.Release()
		st := stateOf(t, pg).Pipelines[0]
		want := []statuspage.RejectionState{{Kind: "bulkhead", Name: "chat", Reason: "full", Calls: 4}}
		if st.Rejected != 4 || len(st.Rejections) != 1 || st.Rejections[0] != want[0] ||
			st.PerSecond[58] != 3 || st.PerSecond[59] != 1 || len(st.PerSecond) != 60 {
			t.Errorf("rejections %d %+v per second %v; want 4 full, 3 then 1", st.Rejected, st.Rejections, st.PerSecond[55:])
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := stateOf(t, pg).Pipelines[0]; st.Rejected != 0 || len(st.Rejections) != 0 {
			t.Errorf("a minute later: %d %+v; want none", st.Rejected, st.Rejections)
		}
		pg.Close()
	})
}

// TestNamesAreEscaped checks that a pipeline's, a policy's and an
// endpoint's names render as text.
func TestNamesAreEscaped(t *testing.T) {
	const evil = `<script>alert("x")</script>`
	p := newPipeline(t, evil, watertight.Config{
		Bulkhead: &bulkhead.Config{Name: evil, Limit: 1},
		Route:    &route.Config{Endpoints: []route.Endpoint{{Name: evil}}},
	})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}, AllowUpdates: true})
	_, html := get(pg, http.MethodGet, "/")
	if strings.Contains(html, "<script") || !strings.Contains(html, "&lt;script&gt;") {
		t.Errorf("the page holds the name unescaped:\n%s", html)
	}
}

// TestBadInput checks the page's answers to what it does not serve.
func TestBadInput(t *testing.T) {
	p := newPipeline(t, "chat", watertight.Config{})
	if _, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{p, nil}}); err == nil || !strings.Contains(err.Error(), "Pipelines[1] is nil") {
		t.Errorf("a nil pipeline: %v", err)
	}
	var typedNil *watertight.Pipeline
	if _, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{typedNil}}); err == nil {
		t.Error("a typed nil pipeline was accepted")
	}
	if _, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{p, p}}); err == nil || !strings.Contains(err.Error(), `"chat" is also`) {
		t.Errorf("two pipelines of one name: %v", err)
	}
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	for _, tc := range []struct {
		method, target string
		code           int
		body           string
	}{
		{http.MethodGet, "/?format=json", 200, `"name":"chat"`},
		{http.MethodGet, "/?format=html", 200, "<h2>chat</h2>"},
		{http.MethodGet, "/?debug=1", 400, "unknown query parameter"},
		{http.MethodGet, "/?format=xml", 400, "unknown query parameter"},
		{http.MethodHead, "/", 200, ""},
		{http.MethodPost, "/", 405, "method not allowed"},
		{http.MethodPut, "/", 405, "method not allowed"},
	} {
		w := httptest.NewRecorder()
		pg.ServeHTTP(w, httptest.NewRequest(tc.method, tc.target, nil))
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s %s: %d %q; want %d with %q", tc.method, tc.target, w.Code, w.Body.String(), tc.code, tc.body)
		}
		if w.Code == 405 && w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: Allow %q", tc.method, w.Header().Get("Allow"))
		}
	}
}

// TestUpdateForm checks that a POST changes a pipeline only with the
// option, the page's token and from the page's origin.
func TestUpdateForm(t *testing.T) {
	chat := newPipeline(t, "chat", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 5}})
	cp, err := compose.New("plain", compose.Policies{})
	if err != nil {
		t.Fatal(err)
	}
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{chat, cp}, AllowUpdates: true})
	srv := httptest.NewServer(pg)
	defer srv.Close()
	_, html := get(pg, http.MethodGet, "/")
	i := strings.Index(html, `name="token" value="`)
	if i < 0 || strings.Count(html, "<form") != 1 {
		t.Fatalf("want one form (chat's; plain is a compose.Pipeline), with a token:\n%s", html)
	}
	token := html[i+len(`name="token" value="`):][:32]
	post := func(token, pipeline, config string, hdr http.Header) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(url.Values{"token": {token}, "pipeline": {pipeline}, "config": {config}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, token, pipeline, config string
		hdr                           http.Header
		code                          int
		body                          string
	}{
		{"no token", "", "chat", `{"bulkhead": {"limit": 2}}`, nil, 403, "token"},
		{"wrong token", strings.Repeat("0", 32), "chat", `{"bulkhead": {"limit": 2}}`, nil, 403, "token"},
		{"cross-site", token, "chat", `{"bulkhead": {"limit": 2}}`, http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403, ""},
		{"invalid", token, "chat", `{"bulkhead": {"limit": 0}}`, nil, 400, "chat: bulkhead.limit: must be &gt;= 1, got 0"},
		{"not updatable", token, "plain", `{}`, nil, 400, "no pipeline named plain can be updated"},
		{"unknown", token, "other", `{}`, nil, 400, "no pipeline named other"},
	} {
		if code, body := post(tc.token, tc.pipeline, tc.config, tc.hdr); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q; want %d with %q", tc.name, code, body, tc.code, tc.body)
		}
		if chat.Bulkhead().Limit() != 5 {
			t.Fatalf("%s: the limit changed to %d", tc.name, chat.Bulkhead().Limit())
		}
	}
	if code, body := post(token, "chat", `{"bulkhead": {"limit": 2}}`, nil); code != 200 || !strings.Contains(body, "Updated chat.") || chat.Bulkhead().Limit() != 2 {
		t.Errorf("a valid update: %d, limit %d: %s", code, chat.Bulkhead().Limit(), body)
	}

	ro := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{chat}})
	if _, html := get(ro, http.MethodGet, "/"); strings.Contains(html, "<form") || strings.Contains(html, "token") {
		t.Error("a read-only page has a form")
	}
}

// TestFiftyPipelines renders a page of 50 pipelines.
func TestFiftyPipelines(t *testing.T) {
	var ps []statuspage.Pipeline
	for i := range 50 {
		ps = append(ps, newPipeline(t, "p"+string(rune('a'+i%26))+string(rune('a'+i/26)), watertight.Config{
			Bulkhead: &bulkhead.Config{Limit: 10}, Retry: &retry.Config{}, Breaker: &breaker.Config{}, Attempt: &deadline.Config{Timeout: time.Second},
		}))
	}
	pg := newPage(t, statuspage.Options{Pipelines: ps})
	if code, html := get(pg, http.MethodGet, "/"); code != 200 || strings.Count(html, "<section") != 50 {
		t.Errorf("%d, %d sections; want 50", code, strings.Count(html, "<section"))
	}
}

// TestNoSecrets checks that neither view carries an endpoint's headers.
func TestNoSecrets(t *testing.T) {
	const secret = "sk-very-secret"
	c, err := watertight.NewHTTPClient("llm", watertight.Config{Route: &route.Config{}}, watertight.HTTPOptions{
		Endpoints: []watertight.HTTPEndpoint{{Endpoint: route.Endpoint{Name: "eu"}, BaseURL: "https://eu.example.com/v1",
			Header: http.Header{"Authorization": {"Bearer " + secret}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{c.Pipeline}, AllowUpdates: true})
	for _, target := range []string{"/", "/?format=json"} {
		if _, body := get(pg, http.MethodGet, target); strings.Contains(body, secret) || strings.Contains(body, "eu.example.com") {
			t.Errorf("%s holds the endpoint's secret or URL", target)
		}
	}
}

// reporter is a policy of another package that reports its state.
type reporter struct{ policy.Policy }

func (reporter) Report() statuspage.Report {
	return statuspage.Report{Kind: "shared", Name: "<b>x</b>", Fields: []statuspage.Field{{Name: "redis", Value: "unreachable", Alert: true}, {Name: "in flight", Value: "3"}}}
}

// TestReporter checks that a Reporter's state shows in both views.
func TestReporter(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	p := newPipeline(t, "chat", watertight.Config{Use: compose.Policies{Bulkhead: reporter{bh}}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	st := stateOf(t, pg)
	if r := st.Pipelines[0].Slots[0].Report; r == nil || r.Kind != "shared" || len(r.Fields) != 2 || !r.Fields[0].Alert {
		t.Errorf("report %+v", r)
	}
	if _, html := get(pg, http.MethodGet, "/"); !strings.Contains(html, `redis <span class="alert">unreachable</span>; in flight <b>3</b>`) || strings.Contains(html, "<b>x</b>") {
		t.Errorf("HTML lacks the report, or holds its name unescaped")
	}
}

// TestLastMinuteOnly checks that a page built after rejections shows none
// of them: they are no second of its last minute.
func TestLastMinuteOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeline(t, "p", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 1}})
		p.CountRejections() // an earlier page's
		held, err := p.Bulkhead().Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			p.Execute(context.Background(), func(context.Context) error { return nil })
		}
		held.Release()
		time.Sleep(10 * time.Minute)
		pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
		time.Sleep(1500 * time.Millisecond)
		if got := pg.State().Pipelines[0].Rejected; got != 0 {
			t.Errorf("Rejected in the last minute = %d; want 0", got)
		}
		pg.Close()
	})
}

// TestPostChecksTheQuery checks that a POST with a query the page does
// not know changes nothing, and that a page that takes updates says so
// in Allow.
func TestPostChecksTheQuery(t *testing.T) {
	p := newPipeline(t, "p", watertight.Config{Bulkhead: &bulkhead.Config{Limit: 5}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}, AllowUpdates: true})
	_, html := get(pg, http.MethodGet, "/")
	i := strings.Index(html, `name="token" value="`)
	token := html[i+len(`name="token" value="`):][:32]
	form := url.Values{"token": {token}, "pipeline": {"p"}, "config": {`{"bulkhead":{"limit":3}}`}}
	req := httptest.NewRequest(http.MethodPost, "/?evil=1", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	pg.ServeHTTP(w, req)
	if w.Code != 400 || p.Bulkhead().Limit() != 5 {
		t.Errorf("POST /?evil=1: %d, limit %d; want 400 and 5", w.Code, p.Bulkhead().Limit())
	}
	w = httptest.NewRecorder()
	pg.ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/", nil))
	if w.Code != 405 || w.Header().Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT: %d, Allow %q; want 405, GET, HEAD, POST", w.Code, w.Header().Get("Allow"))
	}
}

// TestHalfOpenShown checks that a half-open breaker shows as such, with
// its own class.
func TestHalfOpenShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeline(t, "chat", watertight.Config{Breaker: &breaker.Config{ConsecutiveFailures: 1, OpenTimeout: 30 * time.Second}})
		pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
		p.Execute(context.Background(), func(context.Context) error { return errDown })
		time.Sleep(30 * time.Second)
		if _, html := get(pg, http.MethodGet, "/"); !strings.Contains(html, `<span class="breaker-state half-open">half-open</span>`) || !strings.Contains(html, ".half-open") {
			t.Errorf("the page does not show the breaker half-open, styled:\n%s", html)
		}
		pg.Close()
	})
}

// sharedQuota is a ratelimit.Shared that reports its state.
type sharedQuota struct{}

func (sharedQuota) Take(context.Context, int, time.Time) error { return nil }
func (sharedQuota) Settle(int, int)                            {}
func (sharedQuota) Hold(time.Duration)                         {}
func (sharedQuota) Report() statuspage.Report {
	return statuspage.Report{Kind: "quota", Name: "openai", Fields: []statuspage.Field{{Name: "live replicas", Value: "3"}}}
}

// TestSharedQuotaReport checks that a rate limit's shared quota, if it
// reports, shows beside the rate limit.
func TestSharedQuotaReport(t *testing.T) {
	p := newPipeline(t, "chat", watertight.Config{RateLimit: &ratelimit.Config{Shared: sharedQuota{}}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	s := stateOf(t, pg).Pipelines[0].Slots[0]
	if s.RateLimit == nil || s.Report == nil || s.Report.Kind != "quota" || s.Report.Fields[0].Value != "3" {
		t.Errorf("slot %+v, report %+v", s, s.Report)
	}
	if _, html := get(pg, http.MethodGet, "/"); !strings.Contains(html, "no hold") || !strings.Contains(html, "; shared quota <b>openai</b>: live replicas <b>3</b>") {
		t.Errorf("HTML lacks the shared quota's report")
	}
}

// TestKeyedState checks that a keyed.Group shows its live keys.
func TestKeyedState(t *testing.T) {
	g, err := keyed.NewGroup(keyed.Config{Name: "hosts", MaxKeys: 5, New: func(string, string) (policy.Policy, error) {
		return bulkhead.New(bulkhead.Config{Limit: 1})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Execute(policy.WithKey(context.Background(), "a"), func(context.Context) error { return nil })
	p := newPipeline(t, "api", watertight.Config{Use: compose.Policies{Breaker: g}})
	pg := newPage(t, statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	s := stateOf(t, pg).Pipelines[0].Slots[0]
	if s.Type != "keyed" || s.Name != "hosts" || s.Keyed == nil || s.Keyed.Keys != 1 || s.Keyed.MaxKeys != 5 {
		t.Errorf("slot %+v, keyed %+v", s, s.Keyed)
	}
	if _, html := get(pg, http.MethodGet, "/"); !strings.Contains(html, "keys live <b>1</b> of 5") {
		t.Errorf("HTML lacks the live keys")
	}
}
