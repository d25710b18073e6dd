package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// report is what a run found, as -json prints it.
type report struct {
	Quota    quota       `json:"quota"`
	Replicas int         `json:"replicas"`
	Callers  int         `json:"callers_per_replica"`
	Duration float64     `json:"duration_s"` // per arm
	Arms     []armResult `json:"arms"`
}

// quota is the provider's quota, per second.
type quota struct {
	Requests   int `json:"requests_per_s"`
	Tokens     int `json:"tokens_per_s"`
	Burst      int `json:"burst"`
	TokenBurst int `json:"token_burst"`
}

// armResult is what one arm got.
type armResult struct {
	Arm          string  `json:"arm"`
	Served       int     `json:"served"`       // requests the provider served
	Provider429  int     `json:"provider_429"` // requests it answered 429
	Client429    int     `json:"client_429"`   // 429s the replicas saw: the same, unless a call failed in between
	Rejected     int     `json:"rejected"`     // calls watertight rejected before sending
	Failed       int     `json:"failed"`       // calls that ended otherwise
	Tokens       int     `json:"tokens"`       // the usage of the requests served
	Span         float64 `json:"span_s"`       // from the first request served to the last
	RequestsRate float64 `json:"requests_per_s"`
	TokensRate   float64 `json:"tokens_per_s"`
	Allowed      int     `json:"allowed"` // the most requests the quota allows over Span: its burst and its rate, rounded up (Span starts at the first arrival, which may come after its turn)
	MaxRequests  int     `json:"max_requests_1s"`
	MaxTokens    int     `json:"max_tokens_1s"`
}

// newReport returns a report with no arms.
func newReport(d time.Duration) report {
	return report{
		Quota:    quota{Requests: quotaRequests, Tokens: quotaTokens, Burst: burstRequests, TokenBurst: burstTokens},
		Replicas: replicas, Callers: callers, Duration: d.Seconds(),
	}
}

// newArmResult puts what the provider served and the replicas saw
// together.
func newArmResult(arm string, s served, n counts) armResult {
	a := armResult{
		Arm: arm, Served: s.requests, Provider429: s.n429, Client429: n.Throttled,
		Rejected: n.Rejected, Failed: n.Failed, Tokens: s.tokens, Span: s.span.Seconds(),
		MaxRequests: s.maxReqs, MaxTokens: s.maxToks,
	}
	a.Allowed = burstRequests + int(math.Ceil(quotaRequests*a.Span))
	if a.Span > 0 {
		a.RequestsRate, a.TokensRate = float64(s.requests)/a.Span, float64(s.tokens)/a.Span
	}
	return a
}

// writeJSON writes r as indented JSON.
func (r report) writeJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// armTitles say what each arm is.
var armTitles = map[string]string{
	armAlone:  "alone: each replica paces itself to the whole quota",
	armShared: "shared: the replicas share one redisstate.Quota in Redis",
}

// writeTable writes r as a small table per arm.
func (r report) writeTable(w io.Writer) {
	fmt.Fprintf(w, "provider quota: %d requests/s and %d tokens/s, bursts of one second's; %d replicas x %d callers, %gs per arm\n",
		r.Quota.Requests, r.Quota.Tokens, r.Replicas, r.Callers, r.Duration)
	for _, a := range r.Arms {
		fmt.Fprintf(w, "\n%s\n", armTitles[a.Arm])
		row := func(name, value, note string) {
			fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-28s %7s  %s", name, value, note), " "))
		}
		row("served by the provider", fmt.Sprint(a.Served),
			fmt.Sprintf("the quota allows %d in %.2fs (burst %d + %d/s)", a.Allowed, a.Span, r.Quota.Burst, r.Quota.Requests))
		row("429s from the provider", fmt.Sprint(a.Provider429), "")
		row("rejected by watertight", fmt.Sprint(a.Rejected), "never sent")
		if a.Failed > 0 {
			row("failed otherwise", fmt.Sprint(a.Failed), "")
		}
		row("requests/s served", fmt.Sprintf("%.1f", a.RequestsRate), fmt.Sprintf("quota %d", r.Quota.Requests))
		row("tokens/s served", fmt.Sprintf("%.0f", a.TokensRate), fmt.Sprintf("quota %d", r.Quota.Tokens))
		row("most requests in one second", fmt.Sprint(a.MaxRequests), fmt.Sprintf("quota + burst %d", r.Quota.Requests+r.Quota.Burst))
	}
}
