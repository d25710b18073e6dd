package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs a replica's role when the test binary is started again as
// one; otherwise it runs the tests and fails them if a goroutine outlives
// them: the provider's, a replica's reader, or Redis's waiter.
func TestMain(m *testing.M) {
	if isReplica() {
		os.Exit(runReplica())
	}
	goleak.VerifyTestMain(m)
}

// redisServerBin returns the path of redis-server, or skips t if there is
// none (fails it if WATERTIGHT_REQUIRE_REDIS=1, as CI sets).
func redisServerBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found on PATH: install redis-server (Debian: apt-get install redis-server) to run this example's test"
		if os.Getenv("WATERTIGHT_REQUIRE_REDIS") == "1" {
			t.Fatal(msg + " (WATERTIGHT_REQUIRE_REDIS=1)")
		}
		t.Skip(msg)
	}
	return bin
}

// logWriter writes to the test's log.
type logWriter struct{ t *testing.T }

// Write logs p as one line.
func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestArms runs both arms for 2 s each, with replicas that are the test
// binary. With the shared quota the provider answers no 429, and serves
// at most the quota's burst and its rate over the run (plus 1%); with each
// replica alone it answers some.
func TestArms(t *testing.T) {
	bin := redisServerBin(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), bin, self, 2*time.Second, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.writeTable(&out)
	t.Log("\n" + out.String())
	if len(rep.Arms) != 2 || rep.Arms[0].Arm != armAlone || rep.Arms[1].Arm != armShared {
		t.Fatalf("arms %+v, want alone then shared", rep.Arms)
	}
	alone, shared := rep.Arms[0], rep.Arms[1]
	if shared.Provider429 != 0 {
		t.Errorf("with the shared quota the provider answered %d 429s, want none", shared.Provider429)
	}
	if most := burstRequests + quotaRequests*shared.Span*1.01; float64(shared.Served) > most {
		t.Errorf("with the shared quota the provider served %d requests in %.2fs, more than the burst plus the rate plus 1%% (%.1f)",
			shared.Served, shared.Span, most)
	}
	if shared.Served == 0 {
		t.Error("with the shared quota the provider served nothing")
	}
	if alone.Provider429 == 0 {
		t.Error("with each replica alone the provider answered no 429: its quota was never exceeded, so the run shows nothing")
	}
}

// TestJSON: -json's output names every figure of the table.
func TestJSON(t *testing.T) {
	rep := newReport(2 * time.Second)
	rep.Arms = append(rep.Arms, newArmResult(armShared,
		served{requests: 60, tokens: 12000, span: 2 * time.Second, maxReqs: 38, maxToks: 8000}, counts{Served: 60, Rejected: 7}))
	var b strings.Builder
	if err := rep.writeJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Quota map[string]int   `json:"quota"`
		Arms  []map[string]any `json:"arms"`
	}
	if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
		t.Fatal(err)
	}
	a := got.Arms[0]
	for k, want := range map[string]float64{"served": 60, "provider_429": 0, "rejected": 7, "requests_per_s": 30,
		"tokens_per_s": 6000, "max_requests_1s": 38, "allowed": 60} {
		if a[k] != want {
			t.Errorf("%s = %v, want %v", k, a[k], want)
		}
	}
	if got.Quota["requests_per_s"] != quotaRequests || got.Quota["tokens_per_s"] != quotaTokens {
		t.Errorf("quota %v", got.Quota)
	}
}

// TestWindow: the most arrivals in any one second.
func TestWindow(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	as := []arrival{{ms(0), 10}, {ms(400), 20}, {ms(999), 30}, {ms(1000), 40}, {ms(1500), 50}, {ms(3000), 60}}
	reqs, toks := window(as, time.Second)
	if reqs != 3 || toks != 120 {
		t.Errorf("window = %d requests, %d tokens; want 3, 120", reqs, toks)
	}
}

// TestFlags: -h is not an error to report, and a -duration <= 0 is.
func TestFlags(t *testing.T) {
	var out strings.Builder
	if err := cli(context.Background(), []string{"-h"}, &out, &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if err := cli(context.Background(), []string{"-duration", "0s"}, &out, &out); err == nil || !strings.Contains(err.Error(), "-duration") {
		t.Errorf("-duration 0s: %v, want an error naming -duration", err)
	}
}
