package main

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watertight/watertight/ratelimit"
	"github.com/watertight/watertight/redisstate"
)

// The alerting rules and their promtool unit tests.
const (
	rulesFile     = "alerts/watertight.rules.yml"
	rulesTestFile = "alerts/watertight.rules_test.yml"
)

// TestAlertRules runs promtool on the rules: they are valid, and each
// fires in its case and stays silent in the healthy ones. It skips when no
// promtool is installed, unless WATERTIGHT_REQUIRE_PROMETHEUS=1.
func TestAlertRules(t *testing.T) {
	bin := findTool(t, "promtool", "the alerting rules were not checked")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// startAlertSources serves on a loopback port, through [Setup]'s exporter,
// the metrics the rules read that the storm does not make: a rate limit
// held for an hour (watertight_ratelimit_hold_seconds) and a redisstate
// Budget whose Redis refuses every connection, called every 100 ms
// (watertight_redis_fallbacks_total). It returns the server's host:port.
func startAlertSources(t *testing.T) string {
	t.Helper()
	tel, shutdown, err := Setup(t.Context(), SetupConfig{ServiceName: "watertight-alert-sources"})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := ratelimit.New(ratelimit.Config{Name: "held", MaxHold: time.Hour, MeterProvider: tel.MeterProvider})
	if err != nil {
		t.Fatal(err)
	}
	lim.HoldFor(time.Hour)

	// A port nothing listens on: every round trip to Redis is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	client := redisstate.NewClient(&redis.UniversalOptions{Addrs: []string{dead}})
	b, err := redisstate.NewBudget(redisstate.BudgetConfig{Name: "fleet", Limit: 10, Fallback: redisstate.FailOpen,
		Redis: redisstate.Redis{Client: client}, MeterProvider: tel.MeterProvider})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calling := make(chan struct{})
	go func() {
		defer close(calling)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			b.Execute(ctx, func(context.Context) error { return nil })
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	srv := httptest.NewServer(tel.Handler)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-calling
		b.Close()
		client.Close()
		lim.Close()
		shutdown(context.Background())
	})
	return srv.Listener.Addr().String()
}

// heldBySources are the alerts whose condition [startAlertSources] meets:
// pending (or firing) once Prometheus has scraped it twice.
var heldBySources = []string{"WatertightRateLimitHeld", "WatertightRedisUnreachable"}

// promRule is a rule as Prometheus's /api/v1/rules reports it.
type promRule struct {
	Name           string    `json:"name"`
	Query          string    `json:"query"`
	State          string    `json:"state"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

// checkRules waits until Prometheus has evaluated every alerting rule it
// loaded from rulesFile, then checks that each evaluated without error and
// that every watertight_* name in its expression is a metric with series
// or a label Prometheus holds, so that a misspelt name, which would make a
// rule silent for ever, fails here. The alerts of heldBySources must be
// pending or firing.
func checkRules(t *testing.T, api *promAPI) {
	names := regexp.MustCompile(`\bwatertight_\w+`)
	var rules []promRule
	var problems []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		rules, problems = rules[:0], problems[:0]
		var data struct {
			Groups []struct {
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		}
		if err := api.get("/api/v1/rules", nil, &data); err != nil {
			t.Fatal(err)
		}
		var labels []string
		if err := api.get("/api/v1/labels", nil, &labels); err != nil {
			t.Fatal(err)
		}
		for _, g := range data.Groups {
			rules = append(rules, g.Rules...)
		}
		if len(rules) == 0 {
			problems = append(problems, "no rule loaded")
		}
		for _, r := range rules {
			if r.Health != "ok" || r.LastEvaluation.IsZero() {
				problems = append(problems, fmt.Sprintf("%s: health %q, last evaluated %v: %s", r.Name, r.Health, r.LastEvaluation, r.LastError))
			}
			if slices.Contains(heldBySources, r.Name) && r.State == "inactive" {
				problems = append(problems, fmt.Sprintf("%s: inactive, though startAlertSources meets its condition", r.Name))
			}
			for _, n := range names.FindAllString(r.Query, -1) {
				if slices.Contains(labels, n) {
					continue
				}
				if c, err := api.count(n); err != nil || c == 0 {
					problems = append(problems, fmt.Sprintf("%s: %s is neither a metric with series nor a label (%d series, %v)", r.Name, n, c, err))
				}
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	var states []string
	for _, r := range rules {
		states = append(states, r.Name+": "+r.State)
	}
	t.Logf("rules after the storm:\n%s", strings.Join(states, "\n"))
}

// rulesPath returns the absolute path of rulesFile, for a Prometheus
// configuration written elsewhere.
func rulesPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
