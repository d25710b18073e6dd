// Command benchtable reads `go test -bench` output and prints a Markdown
// report: the machine, watertight vs failsafe-go side by side (medians and
// ratios), watertight-only benchmarks, the floors, and the targets checked.
// If sim-adaptive.json (written by TestSimAdaptive) lies beside the raw
// file, the report also has the adaptive limit simulation's figures, and
// its five targets are checked in the targets table. So for the other
// simulations' JSON files beside it: sim-attempts.json, sim-priority.json,
// sim-slow.json and sim-route.json (TestSimRoute, routing around a sick
// endpoint).
//
// Usage: go run ./cmd/benchtable out/raw.txt > out/table.md
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// stats holds the samples of one benchmark, by unit.
type stats map[string][]float64

func (s stats) median(unit string) (float64, bool) {
	v := slices.Clone(s[unit])
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

func parse(r io.Reader) (map[string]stats, []string, error) {
	all := map[string]stats{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		s, ok := all[name]
		if !ok {
			s = stats{}
			all[name] = s
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			s[f[i+1]] = append(s[f[i+1]], v)
		}
	}
	return all, order, sc.Err()
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable raw.txt")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	all, order, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sim, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-adaptive.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	att, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-attempts.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pri, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-priority.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	slow, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-slow.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rt, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-route.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fair, err := readSim(filepath.Join(filepath.Dir(os.Args[1]), "sim-fair.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := report{all: all, sim: sim, att: att, pri: pri, slow: slow, route: rt, fair: fair, w: os.Stdout}
	r.machine()
	r.sideBySide(order)
	r.alone(order)
	r.targets()
	r.simAdaptive()
	r.simAttempts()
	r.simPriority()
	r.simSlow()
	r.simRoute()
	r.simFair()
}

type report struct {
	all  map[string]stats
	sim  map[string]float64 // TestSimAdaptive's JSON; nil if absent
	att  map[string]float64 // TestSimAttempts's JSON; nil if absent
	pri  map[string]float64 // TestSimPriority's JSON; nil if absent
	slow map[string]float64 // TestSimSlowProvider's JSON; nil if absent
	// route is TestSimRoute's JSON; nil if absent.
	route map[string]float64
	// fair is TestSimFairShare's JSON; nil if absent.
	fair map[string]float64
	w    io.Writer
}

// readSim reads TestSimAdaptive's JSON, or returns nil if there is none.
func readSim(path string) (map[string]float64, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

func (r report) p(format string, a ...any) { fmt.Fprintf(r.w, format, a...) }

// get returns the median of unit for name, or NaN-like -1 if missing.
func (r report) get(name, unit string) float64 {
	s, ok := r.all[name]
	if !ok {
		return -1
	}
	v, ok := s.median(unit)
	if !ok {
		return -1
	}
	return v
}

// pairedDiff returns the median of a[i] - b[i] over the rounds both
// benchmarks ran in (run.sh runs every benchmark once per round, so the
// i-th samples of two benchmarks were measured moments apart), or -1 if
// there is none. Less sensitive than a difference of medians to a slow
// spell of a shared machine, which moves both samples of a round.
func (r report) pairedDiff(a, b string) float64 {
	x, y := r.all[a]["ns/op"], r.all[b]["ns/op"]
	n := min(len(x), len(y))
	if n == 0 {
		return -1
	}
	d := stats{"d": make([]float64, n)}
	for i := range n {
		d["d"][i] = x[i] - y[i]
	}
	v, _ := d.median("d")
	return v
}

func (r report) samples(name string) int { return len(r.all[name]["ns/op"]) }

func fmtNum(v float64) string {
	switch {
	case v < 0:
		return "n/a"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

func ratio(a, b float64) string {
	if a < 0 || b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func (r report) machine() {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	r.p("# watertight vs failsafe-go v0.9.8\n\n")
	r.p("Machine: %s, nproc %d, %s, GOOS/GOARCH %s/%s.", model, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if la := os.Getenv("LOADAVG_START"); la != "" {
		r.p(" Load average at start: %s.", la)
	}
	if la := os.Getenv("LOADAVG_END"); la != "" {
		r.p(" At end: %s.", la)
	} else if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.p(" At end: %s.", strings.Join(strings.Fields(string(b))[:3], " "))
	}
	r.p("\n\nMedians of %s interleaved rounds, each running every benchmark once (`-cpu 2`). Ratio is watertight / failsafe: below 1 watertight is faster or allocates less.\n\n", os.Getenv("COUNT"))
}

func (r report) sideBySide(order []string) {
	r.p("## Side by side\n\n")
	r.p("| benchmark | watertight ns/op | failsafe ns/op | ratio | watertight allocs/op | failsafe allocs/op | watertight B/op | failsafe B/op |\n")
	r.p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range order {
		base, ok := strings.CutSuffix(name, "/lib=watertight")
		if !ok {
			continue
		}
		fs := base + "/lib=failsafe"
		if _, ok := r.all[fs]; !ok {
			continue
		}
		wn, fn := r.get(name, "ns/op"), r.get(fs, "ns/op")
		wa, fa := r.get(name, "allocs/op"), r.get(fs, "allocs/op")
		r.p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", strings.TrimPrefix(base, "Benchmark"),
			fmtNum(wn), fmtNum(fn), ratio(wn, fn), fmtNum(wa), fmtNum(fa),
			fmtNum(r.get(name, "B/op")), fmtNum(r.get(fs, "B/op")))
	}
	r.p("\n")
}

func (r report) alone(order []string) {
	r.p("## Watertight only, and floors\n\n")
	r.p("| benchmark | ns/op | allocs/op | B/op |\n|---|---:|---:|---:|\n")
	for _, name := range order {
		base, ok := strings.CutSuffix(name, "/lib=watertight")
		if ok {
			if _, paired := r.all[base+"/lib=failsafe"]; paired {
				continue
			}
		} else if strings.HasSuffix(name, "/lib=failsafe") {
			continue
		}
		r.p("| %s | %s | %s | %s |\n", strings.TrimPrefix(name, "Benchmark"),
			fmtNum(r.get(name, "ns/op")), fmtNum(r.get(name, "allocs/op")), fmtNum(r.get(name, "B/op")))
	}
	r.p("\n")
}

func (r report) check(what, target, got string, ok bool) {
	verdict := "met"
	if !ok {
		verdict = "**UNMET**"
	}
	r.p("| %s | %s | %s | %s |\n", what, target, got, verdict)
}

func (r report) targets() {
	ns := func(n string) float64 { return r.get("Benchmark"+n, "ns/op") }
	allocs := func(n string) float64 { return r.get("Benchmark"+n, "allocs/op") }
	r.p("## Targets (success path, telemetry off unless said)\n\n")
	r.p("| target | bound | measured | verdict |\n|---|---|---|---|\n")

	// The breaker's part of the floor is gobreaker's two-step face, the one
	// the breaker drives (Allow and its done closure, one allocation).
	// This floor is context.WithTimeout + gobreaker + one span on the
	// no-op tracer. The pipeline starts no span with telemetry off, so the
	// second row holds the composition to the floors it still pays: the
	// stricter bound.
	floor := ns("Floor/op=WithTimeout") + ns("Floor/op=gobreaker-2step") + ns("Floor/op=noop-span")
	c, ca := ns("Composed/lib=watertight"), allocs("Composed/lib=watertight")
	r.check("four composed (floors with a no-op span)", fmt.Sprintf("<= WithTimeout + two-step + no-op span %s + 150 ns, <= 8 allocs", fmtNum(floor)),
		fmt.Sprintf("%s ns (%+.0f), %s allocs", fmtNum(c), c-floor, fmtNum(ca)), c <= floor+150 && ca <= 8)
	paid := ns("Floor/op=WithTimeout") + ns("Floor/op=gobreaker-2step")
	r.check("four composed (the floors it pays: no span when telemetry is off)", fmt.Sprintf("<= WithTimeout + two-step %s + 150 ns", fmtNum(paid)),
		fmt.Sprintf("%s ns (%+.0f)", fmtNum(c), c-paid), c <= paid+150)

	cf := ns("Composed/lib=failsafe")
	r.check("four composed against failsafe-go", "<= 0.6x", fmt.Sprintf("%s vs %s ns (%s)", fmtNum(c), fmtNum(cf), ratio(c, cf)), c <= 0.6*cf)

	b, ba := ns("Bulkhead/lib=watertight"), allocs("Bulkhead/lib=watertight")
	sem := r.pairedDiff("BenchmarkBulkhead/lib=watertight", "BenchmarkFloor/op=atomic-semaphore")
	r.check("bulkhead alone", "0 allocs", fmt.Sprintf("%s ns, %s allocs; a bare atomic semaphore %s ns (%+.0f ns per round)",
		fmtNum(b), fmtNum(ba), fmtNum(ns("Floor/op=atomic-semaphore")), sem), ba == 0)

	ad, ada, now := ns("Adaptive/lib=watertight"), allocs("Adaptive/lib=watertight"), ns("Floor/op=2xNow")
	r.check("adaptive alone", fmt.Sprintf("<= bulkhead %s + 2 x time.Now %s + 60 ns, 0 allocs", fmtNum(b), fmtNum(now)),
		fmt.Sprintf("%s ns (%+.0f), %s allocs", fmtNum(ad), ad-b-now, fmtNum(ada)), ad <= b+now+60 && ada == 0)

	rt, rf := ns("Retry/lib=watertight"), ns("Retry/lib=failsafe")
	r.check("retry alone", "<= 0.1x failsafe", fmt.Sprintf("%s vs %s ns (%s)", fmtNum(rt), fmtNum(rf), ratio(rt, rf)), rt <= 0.1*rf)

	// The breaker drives gobreaker's two-step face: what it adds to that is
	// checked, as telemetry's is, on the median of the per-round
	// differences, which a slow spell of a shared machine moves less than
	// a difference of medians.
	br, gb := ns("Breaker/lib=watertight"), ns("Floor/op=gobreaker-2step")
	brPaired := r.pairedDiff("BenchmarkBreaker/lib=watertight", "BenchmarkFloor/op=gobreaker-2step")
	r.check("breaker alone: above gobreaker's two-step Allow + done", "<= 40 ns (median of the per-round differences)",
		fmt.Sprintf("%+.0f ns per round (medians: breaker %s, two-step %s, %+.0f); %s allocs (two-step %s)",
			brPaired, fmtNum(br), fmtNum(gb), br-gb,
			fmtNum(allocs("Breaker/lib=watertight")), fmtNum(allocs("Floor/op=gobreaker-2step"))), brPaired <= 40)

	if r.samples("BenchmarkBreakerSlow/rule=on") > 0 {
		d := r.pairedDiff("BenchmarkBreakerSlow/rule=on", "BenchmarkBreakerSlow/rule=off")
		r.check("breaker with the slow rule: above one without", "<= 40 ns (median of the per-round differences)",
			fmt.Sprintf("%+.0f ns per round (medians: %s vs %s ns); a time.Since is half of 2 x time.Now %s ns", d,
				fmtNum(ns("BreakerSlow/rule=on")), fmtNum(ns("BreakerSlow/rule=off")), fmtNum(ns("Floor/op=2xNow"))), d <= 40)
	}

	for _, n := range []string{"RejectBulkheadFull", "RejectBreakerOpen"} {
		v, a := ns(n+"/lib=watertight"), allocs(n+"/lib=watertight")
		r.check(n, "0 allocs", fmt.Sprintf("%s ns, %s allocs (failsafe-go %s ns, %s allocs)", fmtNum(v), fmtNum(a),
			fmtNum(ns(n+"/lib=failsafe")), fmtNum(allocs(n+"/lib=failsafe"))), a == 0)
	}

	// A loopback GET: the medians of the per-round differences, which a
	// slow spell of the machine moves less than the medians themselves.
	if r.samples("BenchmarkTransport/lib=watertight") > 0 {
		fs := r.pairedDiff("BenchmarkTransport/lib=watertight", "BenchmarkTransport/lib=failsafe")
		fl := r.pairedDiff("BenchmarkTransport/lib=watertight", "BenchmarkTransport/lib=floor")
		r.check("HTTP GET, quick-start pipeline: above failsafehttp", "<= 0 ns (median of the per-round differences)",
			fmt.Sprintf("%+.0f ns per round (medians: %s vs %s ns)", fs, fmtNum(ns("Transport/lib=watertight")), fmtNum(ns("Transport/lib=failsafe"))), fs <= 0)
		r.check("HTTP GET, quick-start pipeline: above lib=floor", "<= 2000 ns (median of the per-round differences)",
			fmt.Sprintf("%+.0f ns per round (floor %s ns)", fl, fmtNum(ns("Transport/lib=floor"))), fl <= 2000)
	}
	if r.samples("BenchmarkHedge/lib=watertight/op=hedge") > 0 {
		h, hf := ns("Hedge/lib=watertight/op=hedge"), ns("Hedge/lib=failsafe/op=hedge")
		r.check("a hedge that never fires", "<= failsafe-go's hedgepolicy", fmt.Sprintf("%s vs %s ns", fmtNum(h), fmtNum(hf)), h <= hf)
	}

	on, off, hand := ns("Telemetry/otel=on"), ns("Telemetry/otel=off"), ns("Telemetry/otel=hand")
	sdk, sdk2 := ns("Floor/op=sdk-span+metrics"), ns("Floor/op=sdk-2spans+histogram")
	// The floor for "on" is "hand": the same pipeline with telemetry off,
	// wrapped by hand in exactly the records "on" makes on success (a call
	// span, an attempt span, a timed histogram Record), with the same SDK
	// providers. on - hand is what watertight's telemetry adds beyond what
	// the SDK charges for those records. The SDK alone (sdk-2spans+histogram,
	// and the one-span sdk-span+metrics) is shown for reference: on - off
	// exceeds it by more than on exceeds hand, because the costs do not add
	// up (the collector and the caches are shared).
	paired := r.pairedDiff("BenchmarkTelemetry/otel=on", "BenchmarkTelemetry/otel=hand")
	r.check("telemetry on: above the SDK's own cost for the same records (by hand)", "<= 500 ns (median of the per-round differences)",
		fmt.Sprintf("%+.0f ns per round (medians: on %s, by hand %s, %+.0f); on - off = %s ns, SDK alone %s ns (1 span: %s); %s allocs (by hand %s)",
			paired, fmtNum(on), fmtNum(hand), on-hand, fmtNum(on-off),
			fmtNum(sdk2), fmtNum(sdk), fmtNum(allocs("Telemetry/otel=on")), fmtNum(allocs("Telemetry/otel=hand"))), paired <= 500)

	for _, n := range []string{"ScaleQueued", "ScaleWaiterTimeout", "ScaleWaiterCancel"} {
		lo, hi := ns(n+"/waiters=10/lib=watertight"), ns(n+"/waiters=10000/lib=watertight")
		r.check(n+" 10 -> 10000 waiters", "within 2x", fmt.Sprintf("%s -> %s ns (%s)", fmtNum(lo), fmtNum(hi), ratio(hi, lo)), hi <= 2*lo)
	}
	for _, n := range []string{"ScaleContended", "ScaleContendedComposed"} {
		lo, hi := ns(n+"/g=2/lib=watertight"), ns(n+"/g=1000/lib=watertight")
		r.check(n+" 1000 vs 2 goroutines", "throughput >= half (ns/op <= 2x)",
			fmt.Sprintf("%s -> %s ns/op (%s)", fmtNum(lo), fmtNum(hi), ratio(hi, lo)), hi <= 2*lo)
	}
	// A retry budget's success path is one deposit (the Budget's mutex, a
	// clock read, the decay): checked, as the breaker's, on the median of
	// the per-round differences, against 1% of a 25 µs network call.
	for _, n := range []string{"RetryBudget", "RetryBudgetParallel"} {
		on, off := "Benchmark"+n+"/lib=watertight/budget=on", "Benchmark"+n+"/lib=watertight/budget=off"
		if r.samples(on) == 0 {
			continue
		}
		d := r.pairedDiff(on, off)
		r.check(n+": a retry with a budget, success path", "<= plain retry + 250 ns (median of the per-round differences)",
			fmt.Sprintf("%+.0f ns per round (medians: %s vs %s ns)", d, fmtNum(r.get(on, "ns/op")), fmtNum(r.get(off, "ns/op"))), d <= 250)
	}
	r.simTargets()
	r.attTargets()
	r.priTargets()
	r.slowTargets()
	r.routeTargets()
	r.fairTargets()
	r.p("\n")
}

// attTargets adds the retry budget and hedging simulation's targets to the
// targets table, if its JSON was found.
func (r report) attTargets() {
	if r.att == nil {
		return
	}
	s := func(k string) float64 {
		v, ok := r.att[k]
		if !ok {
			return math.NaN()
		}
		return v
	}
	amp := s("amp_ours")
	r.check("retry budget (simulation): attempts per call in an outage", "<= 1.25", fmt.Sprintf("%.3f (no budget %.2f, failsafe-go %.2f)",
		amp, s("amp_nobudget"), s("amp_failsafe")), amp <= 1.25)
	share := s("retried_share_10pct")
	r.check("retry budget (simulation): failed first attempts retried at 10% failures", ">= 0.99", fmt.Sprintf("%.4f", share), share >= 0.99)
	p50 := s("tail_p50_ms")
	for _, m := range []struct {
		mode, key, fs string
		att           float64
	}{
		{"fixed 15 ms", "fixed", "fixed", 1.08},
		{"p90", "quantile", "quantile", 1.15},
	} {
		p99, a := s("tail_p99_ours_"+m.key+"_ms"), s("tail_attempts_ours_"+m.key)
		fp, fa := s("tail_p99_failsafe_"+m.fs+"_ms"), s("tail_attempts_failsafe_"+m.fs)
		r.check("hedging (simulation), "+m.mode, fmt.Sprintf("p99 <= 3 x p50, <= %.2f attempts/call, p99 <= failsafe-go's or fewer attempts", m.att),
			fmt.Sprintf("p99 %.1f ms (p50 %.1f), %.3f attempts; failsafe-go %.1f ms, %.3f", p99, p50, a, fp, fa),
			p99 <= 3*p50 && a <= m.att && (p99 <= fp || a < fa))
	}
}

// simAttempts prints the retry budget and hedging simulation's figures, if
// its JSON was found, and the success-path cost of a hedge that never fires.
func (r report) simAttempts() {
	if r.att == nil {
		return
	}
	num := func(k string, digits int) string {
		v, ok := r.att[k]
		if !ok {
			return "n/a"
		}
		return strconv.FormatFloat(v, 'f', digits, 64)
	}
	r.p("## Retry budget and hedging (simulation)\n\n")
	r.p("`TestSimAttempts`, in simulated time (testing/synctest). Outage: one call per ms, open loop, every attempt fails after 5 ms, " +
		"MaxAttempts 3, 50 ms between attempts, 30 s measured after 10 s: attempts per call. Tail: attempts of 8-12 ms, 5%% of 100 ms, " +
		"10 000 calls at 200/s, MaxHedges 1.\n\n")
	r.p("| | no budget | watertight budget | failsafe-go budget |\n|---|---:|---:|---:|\n")
	r.p("| attempts per call in the outage | %s | %s | %s |\n\n", num("amp_nobudget", 2), num("amp_ours", 3), num("amp_failsafe", 2))
	r.p("With 10%% of attempts failing independently, %s of failed first attempts were retried (watertight).\n\n", num("retried_share_10pct", 4))
	r.p("| tail (p50 %s ms without hedging, p99 %s ms) | p99 ms | attempts per call |\n|---|---:|---:|\n",
		num("tail_p50_ms", 1), num("tail_p99_nohedge_ms", 1))
	r.p("| watertight Hedge, fixed 15 ms | %s | %s |\n", num("tail_p99_ours_fixed_ms", 1), num("tail_attempts_ours_fixed", 3))
	r.p("| failsafe-go hedgepolicy, NewWithDelay(15ms) | %s | %s |\n", num("tail_p99_failsafe_fixed_ms", 1), num("tail_attempts_failsafe_fixed", 3))
	r.p("| watertight Hedge, p90 (floor 5 ms) | %s | %s |\n", num("tail_p99_ours_quantile_ms", 1), num("tail_attempts_ours_quantile", 3))
	r.p("| failsafe-go hedgepolicy, 0.9 quantile | %s | %s |\n\n", num("tail_p99_failsafe_quantile_ms", 1), num("tail_attempts_failsafe_quantile", 3))
	if r.samples("BenchmarkHedge/lib=watertight/op=hedge") > 0 {
		g := func(n, u string) string { return fmtNum(r.get("BenchmarkHedge/lib="+n, u)) }
		r.p("A hedge that never fires (success path, medians): watertight %s ns, %s allocs; plain retry %s ns, %s allocs; failsafe-go hedgepolicy %s ns, %s allocs.\n\n",
			g("watertight/op=hedge", "ns/op"), g("watertight/op=hedge", "allocs/op"), g("watertight/op=retry", "ns/op"),
			g("watertight/op=retry", "allocs/op"), g("failsafe/op=hedge", "ns/op"), g("failsafe/op=hedge", "allocs/op"))
	}
}

// simGet returns the simulation's value for key, and whether it is there.
func (r report) simGet(key string) (float64, bool) {
	v, ok := r.sim[key]
	return v, ok
}

// simTargets adds the adaptive limit simulation's five targets to the
// targets table, if its JSON was found.
func (r report) simTargets() {
	if r.sim == nil {
		return
	}
	s := func(k string) float64 {
		v, ok := r.simGet(k)
		if !ok {
			return math.NaN() // every comparison with NaN is false: UNMET
		}
		return v
	}
	gOurs, gBest, gFs := s("goodput_ours"), s("goodput_best_static"), s("goodput_failsafe")
	pOurs, pFs := s("p99_ours_ms"), s("p99_failsafe_ms")
	r.check("adaptive (simulation): goodput", ">= 95% of the best static limit's",
		fmt.Sprintf("%.1f vs %.1f calls/s (%.1f%%)", gOurs, gBest, 100*gOurs/gBest), gOurs >= 0.95*gBest)
	ratio := s("p99_ratio_ours")
	r.check("adaptive (simulation): worst phase's p99 / B", "<= 2", fmt.Sprintf("%.2f", ratio), ratio <= 2)
	settle := s("settle_s_ours")
	r.check("adaptive (simulation): settling time after a change of capacity", "<= 10 s (longest of three)",
		fmt.Sprintf("%.1f s", settle), settle <= 10)
	drift := s("drift_pct_ours")
	r.check("adaptive (simulation): drift over the 300 s incident", "within 20%",
		fmt.Sprintf("%+.1f%%", drift), math.Abs(drift) <= 20)
	r.check("adaptive (simulation): against failsafe-go's adaptivelimiter", "beats it on goodput or p99, loses neither by > 2%",
		fmt.Sprintf("goodput %.1f vs %.1f calls/s, p99 %.1f vs %.1f ms", gOurs, gFs, pOurs, pFs),
		(gOurs > gFs || pOurs < pFs) && gOurs >= 0.98*gFs && pOurs <= 1.02*pFs)
}

// simAdaptive prints the adaptive limit simulation's figures, if its JSON
// was found.
func (r report) simAdaptive() {
	if r.sim == nil {
		return
	}
	num := func(k string, digits int) string {
		v, ok := r.simGet(k)
		if !ok {
			return "n/a"
		}
		return strconv.FormatFloat(v, 'f', digits, 64)
	}
	pct := func(k string) string {
		v, ok := r.simGet(k)
		if !ok {
			return "n/a"
		}
		return fmt.Sprintf("%+.1f%%", v)
	}
	r.p("## Adaptive limit (simulation)\n\n")
	r.p("`TestSimAdaptive`: a simulated dependency serving C calls at once at base latency B (latency B x (1 + queued / C) above C), "+
		"offered open loop twice its capacity (2C/B calls/s), no queue anywhere: 60 s at C = 10, B = 20 ms; 60 s at C = 5; "+
		"60 s at C = 10; then a 300 s incident at C = 5, B = 40 ms (480 s in all, simulated with testing/synctest). "+
		"Goodput: calls admitted, successful and within the 100 ms SLO, per second of the whole run. p99 of admitted calls; "+
		"worst phase p99 / B: the largest over the phases of the phase's p99 divided by its B. Settling: the longest over the three changes "+
		"of capacity of the time until the limit stays within 10%% of its median over the 30 s after the change (30 = never within the window). "+
		"Drift: the limit at the end of the incident against the limit 60 s into it. One call at a time, the p99 is %s ms. "+
		"The limits over time are plotted in `bench/adaptive-limit.svg`.\n\n", num("p99_uncongested_ms", 1))
	r.p("| arm | goodput calls/s | p99 ms | worst phase p99 / B | rejections | settling s | drift |\n")
	r.p("|---|---:|---:|---:|---:|---:|---:|\n")
	r.p("| static bulkhead, best limit (%s, of 4 to 20) | %s | %s | %s | %s | - | - |\n", num("best_static_limit", 0),
		num("goodput_best_static", 1), num("p99_best_static_ms", 1), num("p99_ratio_best_static", 2), num("rejections_best_static", 0))
	r.p("| static bulkhead, mistuned (%s, twice the best) | %s | %s | %s | %s | - | - |\n", num("mistuned_limit", 0),
		num("goodput_mistuned", 1), num("p99_mistuned_ms", 1), num("p99_ratio_mistuned", 2), num("rejections_mistuned", 0))
	r.p("| failsafe-go adaptivelimiter, defaults | %s | %s | %s | %s | %s | %s |\n",
		num("goodput_failsafe", 1), num("p99_failsafe_ms", 1), num("p99_ratio_failsafe", 2), num("rejections_failsafe", 0),
		num("settle_s_failsafe", 1), pct("drift_pct_failsafe"))
	r.p("| watertight adaptive, defaults | %s | %s | %s | %s | %s | %s |\n",
		num("goodput_ours", 1), num("p99_ours_ms", 1), num("p99_ratio_ours", 2), num("rejections_ours", 0),
		num("settle_s_ours", 1), pct("drift_pct_ours"))
	r.p("\n")
}

// simPriority prints the priority simulation's figures, if its JSON was
// found, and the cost of a priority on the bulkhead's success path.
func (r report) simPriority() {
	if r.pri == nil {
		return
	}
	r.p("## Priority load shedding (simulation)\n\n")
	r.p("`TestSimPriority`, in simulated time (testing/synctest): one limit of 50 for every route; 80 sheddable chats of 30 s at once, " +
		"then 1 s later 50 critical logins of 1 ms; 1 s of patience everywhere.\n\n")
	r.p("| arm | logins run | logins refused | login p99 ms | chats run | chats refused | longest wait to be refused |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range []struct{ key, what string }{
		{"ours", "watertight bulkhead, Reserve[critical] 20"},
		{"ours-adaptive", "watertight adaptive limit 10-200 from 50, Reserve[critical] 20"},
		{"ours-nopriority", "watertight bulkhead, no priorities"},
		{"failsafe-fixed", "failsafe-go PriorityLimiter, limit 50"},
		{"failsafe-adaptive", "failsafe-go PriorityLimiter, limits 10-200 from 50"},
	} {
		g := func(k string) string { return strconv.FormatFloat(r.pri[a.key+"_"+k], 'f', -1, 64) }
		p99 := g("login_p99_ms")
		if r.pri[a.key+"_login_ok"] == 0 {
			p99 = "-" // no login ran
		}
		r.p("| %s | %s | %s | %s | %s | %s | %s s |\n", a.what, g("login_ok"), g("login_errors"), p99,
			g("chat_ok"), g("chat_refused"), g("chat_refused_after_s"))
	}
	r.p("\n")
	if r.samples("BenchmarkBulkheadPriority/ctx=none") > 0 {
		r.p("A bulkhead call (success path, medians): %s ns without a priority, %s ns for a critical call against a reserve.\n\n",
			fmtNum(r.get("BenchmarkBulkheadPriority/ctx=none", "ns/op")), fmtNum(r.get("BenchmarkBulkheadPriority/ctx=critical", "ns/op")))
	}
}

// priTargets adds the priority simulation's target to the targets table,
// if its JSON was found.
func (r report) priTargets() {
	if r.pri == nil {
		return
	}
	for _, arm := range []string{"ours", "ours-adaptive"} {
		errs, p99 := r.pri[arm+"_login_errors"], r.pri[arm+"_login_p99_ms"]
		r.check("priority (simulation), "+arm+": critical logins past 80 sheddable chats", "every login runs, p99 <= 5 ms",
			fmt.Sprintf("%.0f refused, p99 %.1f ms", errs, p99), errs == 0 && p99 <= 5)
	}
}

// simSlow prints the slow-call simulation's figures, if its JSON was found.
func (r report) simSlow() {
	if r.slow == nil {
		return
	}
	r.p("## A provider that turns slow (simulation)\n\n")
	r.p("`TestSimSlowProvider`, in simulated time (testing/synctest): 20 calls/s for 150 s, each taking 2 s until 30 s and 25 s after; " +
		"a bulkhead of 10 with no queue, a 30 s attempt timeout, a breaker opening on 5 failures in a row for 10 s.\n\n")
	r.p("| arm | opened after the change | calls that paid 25 s | paid until (after the change) | breaker rejections | longest | bulkhead rejections |\n")
	r.p("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range []struct{ key, what string }{
		{"ours-slow", "watertight, slow rule (5 s, ratio 0.5, 5 calls, window 10 s)"},
		{"ours", "watertight, no slow rule"},
		{"failsafe", "failsafe-go (no slow rule)"},
	} {
		g := func(k string) string { return strconv.FormatFloat(r.slow[a.key+"_"+k], 'f', -1, 64) }
		opened := g("open_after_s") + " s"
		if r.slow[a.key+"_open_after_s"] < 0 {
			opened = "never"
		}
		r.p("| %s | %s | %s | %s s | %s | %s ms | %s |\n", a.what, opened, g("paid_25s"), g("paying_until_s"),
			g("breaker_rejected"), g("rejected_max_ms"), g("bulkhead_rejected"))
	}
	r.p("\n")
}

// slowTargets adds the slow-call simulation's target to the targets table,
// if its JSON was found.
func (r report) slowTargets() {
	if r.slow == nil {
		return
	}
	open, rej := r.slow["ours-slow_open_after_s"], r.slow["ours-slow_rejected_max_ms"]
	r.check("slow rule (simulation): a provider from 2 s to 25 s", "opens within 10 s of the change, rejections < 1 ms",
		fmt.Sprintf("opened after %.1f s, longest rejection %.3f ms; without the rule %.0f calls paid 25 s, with it %.0f",
			open, rej, r.slow["ours_paid_25s"], r.slow["ours-slow_paid_25s"]), open >= 0 && open <= 10 && rej < 1)
}

// routeArms are TestSimRoute's arms, in the order of its table.
var routeArms = []struct{ key, what string }{
	{"rr", "round robin"},
	{"random", "uniform random (LiteLLM simple-shuffle)"},
	{"least", "least in flight (LiteLLM least-busy)"},
	{"watertight", "watertight Route (p2c, peak EWMA), breaker, Retry"},
}

// simRoute prints the routing simulation's figures, if its JSON was found.
func (r report) simRoute() {
	if r.route == nil {
		return
	}
	r.p("## Routing around a sick endpoint (simulation)\n\n")
	r.p("`TestSimRoute`, in simulated time (testing/synctest): 200 calls/s for 240 s over 3 endpoints; each call needs 1 unit of work " +
		"(x a jitter in [0.8, 1.2]) done at speed 1/latency (2 s healthy), so a slowdown slows the calls in flight too. Endpoint 1 is sick from " +
		"60 s to 180 s: slow (30 s), fail (a 500 after 50 ms) or hang (never answers). Every arm: 2 attempts at most, the retry on another " +
		"endpoint after 10 ms +-50%%, a 60 s timeout per attempt, no bulkhead; watertight's endpoints each have a breaker (5 failures in a row, " +
		"open 5 s). Sick share: of the attempts started in [60 s, 180 s). p99: of the calls started in [60 s, 180 s) and in [20 s, 60 s) " +
		"(healthy; in the slow scenario it holds the calls slowed at 60 s), base: [20 s, 50 s), which no fault touches. Move: to the end of the " +
		"last 1 s bin of the sick phase sending the sick endpoint > 5%% of its attempts (-1: never). Return: from 180 s to the first 1 s bin " +
		"from which every 5 s window gives the sick endpoint 25-41%% of the attempts (-1: never).\n\n")
	r.p("| scenario | arm | sick share | p99 sick s | p99 healthy s | ratio | p99 base s | calls failed | attempts | move s | return s |\n")
	r.p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sc := range []string{"slow", "fail", "hang"} {
		for _, a := range routeArms {
			g := func(k string, digits int) string {
				v, ok := r.route[sc+"_"+a.key+"_"+k]
				if !ok {
					return "n/a"
				}
				return strconv.FormatFloat(v, 'f', digits, 64)
			}
			r.p("| %s | %s | %s%% | %s | %s | %sx | %s | %s | %s | %s | %s |\n", sc, a.what, g("sick_share_pct", 2),
				g("p99_sick_s", 2), g("p99_healthy_s", 2), g("p99_ratio", 2), g("p99_base_s", 2), g("failed", 0), g("attempts", 0),
				g("move_s", 0), g("return_s", 0))
		}
	}
	r.p("\n")
}

// routeTargets adds the routing targets to the targets table: the cost
// of a pick and of a Route in a pipeline, if benchmarked, and the
// simulation's, if its JSON was found.
func (r report) routeTargets() {
	if r.samples("BenchmarkPick/op=choose8") > 0 {
		v, a := r.get("BenchmarkPick/op=choose8", "ns/op"), r.get("BenchmarkPick/op=choose8", "allocs/op")
		r.check("route: a pick among 8 endpoints (the choice, a clock read included)", "<= 100 ns, 0 allocs",
			fmt.Sprintf("%s ns, %s allocs; a bare call %s ns; an attempt's whole bookkeeping (Pick + Done, two clock reads) %s ns, %s allocs",
				fmtNum(v), fmtNum(a), fmtNum(r.get("BenchmarkPick/op=bare", "ns/op")),
				fmtNum(r.get("BenchmarkRoute/op=pick8", "ns/op")), fmtNum(r.get("BenchmarkRoute/op=pick8", "allocs/op"))),
			v <= 100 && a == 0)
	}
	if r.samples("BenchmarkRouted/route=1ep") > 0 {
		d := r.pairedDiff("BenchmarkRouted/route=1ep", "BenchmarkRouted/route=none")
		r.check("route: a Route of 1 endpoint in a pipeline with a Retry", "<= +300 ns (median of the per-round differences)",
			fmt.Sprintf("%+.0f ns per round (medians: %s vs %s ns)", d, fmtNum(r.get("BenchmarkRouted/route=1ep", "ns/op")),
				fmtNum(r.get("BenchmarkRouted/route=none", "ns/op"))), d <= 300)
	}
	if r.route == nil {
		return
	}
	for _, sc := range []string{"slow", "fail", "hang"} {
		g := func(k string) float64 {
			v, ok := r.route[sc+"_watertight_"+k]
			if !ok {
				return math.NaN()
			}
			return v
		}
		share, ratio, move, ret := g("sick_share_pct"), g("p99_ratio"), g("move_s"), g("return_s")
		r.check("route (simulation), "+sc+": watertight", "sick share <= 1%, sick p99 <= 1.5x healthy, move <= 1 s, return <= 40 s",
			fmt.Sprintf("%.2f%%, %.2fx (%.2fx the base p99), %g s, %g s", share, ratio, g("p99_sick_s")/g("p99_base_s"), move, ret),
			share <= 1 && ratio <= 1.5 && move >= 0 && move <= 1 && ret >= 0 && ret <= 40)
	}
}
