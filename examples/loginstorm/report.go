package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted,
// which must be in ascending order: sorted[ceil(n*p)-1], as the seed's p99.
// With 50 samples p99 is the maximum. It returns 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps 100*0.07 = 7.000000000000001 at rank 7, not 8.
	rank := int(math.Ceil(float64(n)*p - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// summary is one mode's row of the report.
type summary struct {
	Mode string
	loadResult
}

// modeJSON is one mode in the -json output.
type modeJSON struct {
	Logins      int     `json:"logins"`
	LoginErrors int     `json:"login_errors"`
	LoginP50    float64 `json:"login_p50_ms"`
	LoginP99    float64 `json:"login_p99_ms"`
	LoginMax    float64 `json:"login_max_ms"`
	ChatOK      int     `json:"chat_ok"`
	ChatBusy    int     `json:"chat_busy"`
	ChatOther   int     `json:"chat_other"`
	Wall        float64 `json:"wall_ms"`
	BusyP50     float64 `json:"chat_503_p50_ms"`
	BusyMax     float64 `json:"chat_503_max_ms"`
	// Route mode only.
	OKP99         *float64       `json:"chat_200_p99_ms,omitempty"`
	StormSlow     *int           `json:"storm_chats_to_slow,omitempty"`
	UpstreamCalls map[string]int `json:"upstream_calls,omitempty"` // the warm-up's included
	HealthyPeak   *int           `json:"healthy_peak,omitempty"`   // the most at once at the healthy upstream
}

// reportJSON is the whole -json output.
type reportJSON struct {
	DelayMs float64             `json:"delay_ms"`
	Chats   int                 `json:"chats"`
	Logins  int                 `json:"logins_per_round"`
	Rounds  int                 `json:"rounds"`
	Modes   map[string]modeJSON `json:"modes"`
	Spread  map[string]modeJSON `json:"spread,omitempty"` // the chats spread over one delay
	// Tenants is tenants mode: per arm (fifo, fair_share), per tenant
	// (noisy, quiet).
	Tenants  map[string]map[string]tenantJSON `json:"tenants,omitempty"`
	P99Ratio float64                          `json:"p99_ratio,omitempty"` // shared p99 / bulkhead p99
}

// params is the load that produced a report.
type params struct {
	Delay                 time.Duration
	Chats, Logins, Rounds int
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// p99Ratio is shared's login p99 over bulkhead's, or 0 if either is missing.
func p99Ratio(rows []summary) float64 {
	var shared, bh time.Duration
	for _, s := range rows {
		switch s.Mode {
		case modeShared:
			shared = percentile(s.Logins, 0.99)
		case modeBulkhead:
			bh = percentile(s.Logins, 0.99)
		}
	}
	if shared == 0 || bh == 0 {
		return 0
	}
	return float64(shared) / float64(bh)
}

// writeJSON writes rows, spread (the runs with the chats spread) and
// tenants (tenants mode's arms) as one JSON object, with a newline.
func writeJSON(w io.Writer, p params, rows, spread []summary, tenants []tenantArm) error {
	out := reportJSON{
		DelayMs: ms(p.Delay),
		Chats:   p.Chats,
		Logins:  p.Logins,
		Rounds:  p.Rounds,
		Modes:   modesJSON(rows),
	}
	if len(spread) > 0 {
		out.Spread = modesJSON(spread)
	}
	if len(tenants) > 0 {
		out.Tenants = tenantsJSON(tenants)
	}
	if r := p99Ratio(rows); r > 0 {
		out.P99Ratio = math.Round(r*10) / 10
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}

func modesJSON(rows []summary) map[string]modeJSON {
	out := make(map[string]modeJSON, len(rows))
	for _, s := range rows {
		out[s.Mode] = modeJSON{
			Logins:      len(s.Logins),
			LoginErrors: s.LoginErrors,
			LoginP50:    ms(percentile(s.Logins, 0.50)),
			LoginP99:    ms(percentile(s.Logins, 0.99)),
			LoginMax:    ms(percentile(s.Logins, 1)),
			ChatOK:      s.ChatOK,
			ChatBusy:    s.ChatBusy,
			ChatOther:   s.ChatOther,
			Wall:        ms(s.Wall),
			BusyP50:     ms(percentile(s.Busy, 0.50)),
			BusyMax:     ms(percentile(s.Busy, 1)),
		}
		if s.Mode == modeRoute {
			m := out[s.Mode]
			p99, slow := ms(percentile(s.OK, 0.99)), s.Upstreams["slow"]
			m.OKP99, m.StormSlow, m.UpstreamCalls = &p99, &slow, s.UpstreamCalls
			if s.UpstreamCalls != nil {
				peak := s.HealthyPeak
				m.HealthyPeak = &peak
			}
			out[s.Mode] = m
		}
	}
	return out
}

// writeTable writes rows as a text table, one line per mode, with the
// shared/bulkhead p99 ratio under it when both modes ran, then spread.
func writeTable(w io.Writer, p params, rows, spread []summary) error {
	if len(rows) > 0 {
		if err := writeStorm(w, p, rows); err != nil {
			return err
		}
	}
	if len(spread) == 0 {
		return nil
	}
	if len(rows) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "slow provider: %d chats spread over %v (upstream delay %v); the breaker's slow rule: %v\n\n", p.Chats, 2*p.Delay, p.Delay, slowFor(p.Delay).Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-8s\tchats that held a slot %v\tchat 503\t503 p50\t503 max\tchat other\twall\t\n", "mode", p.Delay)
	for _, s := range spread {
		fmt.Fprintf(tw, "%-8s\t%d\t%d\t%s\t%s\t%d\t%s\t\n", s.Mode, s.ChatOK, s.ChatBusy,
			fmtMs(percentile(s.Busy, 0.50)), fmtMs(percentile(s.Busy, 1)), s.ChatOther, fmtSec(s.Wall))
	}
	return tw.Flush()
}

// writeStorm writes the login storm's table.
func writeStorm(w io.Writer, p params, rows []summary) error {
	fmt.Fprintf(w, "loginstorm: %d chats at once, then %d logins %v later", p.Chats, p.Logins, waveGap)
	if p.Rounds > 1 {
		fmt.Fprintf(w, ", %d waves %v apart (%d login samples)", p.Rounds, waveGap, p.Logins*p.Rounds)
	}
	fmt.Fprintf(w, "; upstream delay %v\n\n", p.Delay)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("mode")
	for _, s := range rows {
		width = max(width, len(s.Mode))
	}
	// tabwriter aligns every column right; padding the mode column to its
	// width makes it read left-aligned.
	fmt.Fprintf(tw, "%-*s\tlogin p50\tlogin p99\tlogin max\tlogin errors\tchat 200\tchat 503\tchat other\twall\t\n", width, "mode")
	for _, s := range rows {
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t\n", width, s.Mode,
			fmtMs(percentile(s.Logins, 0.50)), fmtMs(percentile(s.Logins, 0.99)), fmtMs(percentile(s.Logins, 1)),
			s.LoginErrors, s.ChatOK, s.ChatBusy, s.ChatOther, fmtSec(s.Wall))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r := p99Ratio(rows); r > 0 {
		if _, err := fmt.Fprintf(w, "\nlogin p99: %sx lower with the bulkhead\n", group(int64(math.Round(r)))); err != nil {
			return err
		}
	}
	for _, s := range rows {
		if s.Mode == modeRoute {
			_, err := fmt.Fprintf(w, "\nroute: chats answered 200: %d, p99 %s, %d of them by the slow upstream; requests each upstream got, the warm-up's included: slow %d, healthy %d\n",
				s.ChatOK, fmtMs(percentile(s.OK, 0.99)), s.Upstreams["slow"], s.UpstreamCalls["slow"], s.UpstreamCalls["healthy"])
			return err
		}
	}
	return nil
}

// fmtMs renders d in milliseconds: three significant decimals below 10 ms,
// whole milliseconds with thousands grouped above.
func fmtMs(d time.Duration) string {
	m := float64(d) / 1e6
	switch {
	case m < 10:
		return strconv.FormatFloat(m, 'f', 2, 64) + " ms"
	case m < 100:
		return strconv.FormatFloat(m, 'f', 1, 64) + " ms"
	default:
		return group(int64(math.Round(m))) + " ms"
	}
}

// fmtSec renders d in seconds to the tenth.
func fmtSec(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" }

// group writes n with a space between groups of three digits: 29 439.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}
