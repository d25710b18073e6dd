package redisstate_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watertight/watertight"
	"github.com/watertight/watertight/breaker"
	"github.com/watertight/watertight/compose"
	"github.com/watertight/watertight/redisstate"
	"github.com/watertight/watertight/statuspage"
)

// reportRedis returns the Redis settings of the report tests: patient
// round trips, and a guard that lets Redis be tried again 10 ms after it
// opened, so that a restarted Redis is found at once.
func reportRedis(t *testing.T, addr string) redisstate.Redis {
	r := patientRedis(newClient(t, addr))
	r.RetryAfter = 10 * time.Millisecond
	return r
}

// field returns r's field name, failing t if there is none.
func field(t *testing.T, r statuspage.Report, name string) statuspage.Field {
	t.Helper()
	for _, f := range r.Fields {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("report %+v has no field %q", r, name)
	return statuspage.Field{}
}

// hasField reports whether r has a field name.
func hasField(r statuspage.Report, name string) bool {
	for _, f := range r.Fields {
		if f.Name == name {
			return true
		}
	}
	return false
}

// unreachable reports whether r says Redis is unreachable, with Alert.
func unreachable(r statuspage.Report) bool {
	for _, f := range r.Fields {
		if f.Name == "redis" {
			return f.Alert && strings.HasPrefix(f.Value, "unreachable since ")
		}
	}
	return false
}

// pageReport builds a status page of a watertight pipeline with use, and
// returns the report its JSON view shows for slot.
func pageReport(t *testing.T, use compose.Policies, slot string) statuspage.Report {
	t.Helper()
	p, err := watertight.New("chat", watertight.Config{Use: use})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pg, err := statuspage.New(statuspage.Options{Pipelines: []statuspage.Pipeline{p}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	w := httptest.NewRecorder()
	pg.ServeHTTP(w, httptest.NewRequest("GET", "/?format=json", nil))
	var st statuspage.State
	if err := json.Unmarshal(w.Body.Bytes(), &st); w.Code != 200 || err != nil {
		t.Fatalf("JSON view: %d %v: %s", w.Code, err, w.Body)
	}
	for _, s := range st.Pipelines[0].Slots {
		if s.Slot == slot && s.Report != nil {
			return *s.Report
		}
	}
	t.Fatalf("JSON view has no report in slot %s: %s", slot, w.Body)
	return statuspage.Report{}
}

// TestBudgetReport: a Budget's Report shows its local view; Redis not
// asked yet, then reachable while it answers, unreachable with Alert once
// a call has fallen back after Redis died (also on the page's JSON view),
// and reachable again once it answers again.
func TestBudgetReport(t *testing.T) {
	s := startRedis(t)
	b := newBudget(t, redisstate.BudgetConfig{Name: "report", Limit: 4, Replica: "r1", Redis: reportRedis(t, s.Addr())})
	ctx := context.Background()
	r := b.Report()
	if r.Kind != redisstate.KindBudget || r.Name != "report" || field(t, r, "redis").Value != "not asked yet" ||
		field(t, r, "redis").Alert || field(t, r, "redis last answer").Value != "never" {
		t.Fatalf("before any call: %+v", r)
	}

	err := b.Execute(ctx, func(context.Context) error { r = b.Report(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"replica": "r1", "limit": "4", "in flight here": "1", "waiting here": "0",
		"live replicas": "1", "fallback": "local_share (4 here)", "redis": "reachable"}
	for name, v := range want {
		if f := field(t, r, name); f.Value != v || f.Alert {
			t.Errorf("during a call, %s = %+v, want %q", name, f, v)
		}
	}
	if field(t, r, "redis last answer").Value == "never" {
		t.Errorf("answered, yet: %+v", r)
	}

	s.Kill()
	if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("LocalShare while Redis is down: %v", err)
	}
	if r := b.Report(); !unreachable(r) || field(t, r, "in flight here").Value != "0" {
		t.Fatalf("after a fallback: %+v", r)
	}
	if r := pageReport(t, compose.Policies{Bulkhead: b}, "Bulkhead"); r.Kind != redisstate.KindBudget || !unreachable(r) {
		t.Fatalf("page's JSON view: %+v", r)
	}

	s.Restart()
	eventually(t, patience, "reachable once Redis answers again", func() bool {
		b.Execute(ctx, func(context.Context) error { return nil })
		f := field(t, b.Report(), "redis")
		return f.Value == "reachable" && !f.Alert
	})
}

// TestSharedBreakerReport: a SharedBreaker's Report shows its local
// breaker's state, open with Alert and until when after a trip, and Redis
// reachable while polls are answered, then unreachable with Alert once a
// poll failed after Redis died (also on the page's JSON view).
func TestSharedBreakerReport(t *testing.T) {
	s := startRedis(t)
	br := newShared(t, redisstate.BreakerConfig{Breaker: breaker.Config{Name: "report", ConsecutiveFailures: 1, OpenTimeout: time.Minute},
		Replica: "r1", Redis: reportRedis(t, s.Addr()), PollInterval: 5 * time.Millisecond})
	eventually(t, patience, "reachable once a poll is answered", func() bool {
		return field(t, br.Report(), "redis").Value == "reachable"
	})
	r := br.Report()
	if r.Kind != redisstate.KindSharedBreaker || r.Name != "report" || field(t, r, "replica").Value != "r1" ||
		field(t, r, "state").Value != "closed" || field(t, r, "state").Alert || hasField(r, "open until") {
		t.Fatalf("closed: %+v", r)
	}

	br.Execute(context.Background(), func(context.Context) error { return errBoom })
	r = br.Report()
	if f := field(t, r, "state"); f.Value != "open" || !f.Alert || field(t, r, "open until").Value == "" {
		t.Fatalf("after a trip: %+v", r)
	}
	if br.State() != breaker.Open {
		t.Fatalf("Report moved the breaker on: %v", br.State())
	}

	s.Kill()
	eventually(t, patience, "unreachable once a poll failed", func() bool { return unreachable(br.Report()) })
	r = pageReport(t, compose.Policies{Breaker: br}, "Breaker")
	if r.Kind != redisstate.KindSharedBreaker || !unreachable(r) || !field(t, r, "state").Alert {
		t.Fatalf("page's JSON view: %+v", r)
	}
}
