package main

import (
	"fmt"
	"strconv"
)

// fairArms are the arms of TestSimFairShare, as the table names them.
var fairArms = []struct{ key, what string }{
	{"ours-fair", "watertight bulkhead, FairShare"},
	{"ours-fifo", "watertight bulkhead, first come first served"},
	{"failsafe-fair", "failsafe-go PriorityLimiter with a UsageTracker"},
}

// simFair prints the fair share simulation's figures, if its JSON was
// found.
func (r report) simFair() {
	if r.fair == nil {
		return
	}
	r.p("## One noisy tenant (simulation)\n\n")
	r.p("`TestSimFairShare`, in simulated time (testing/synctest): a dependency that answers in 100 ms, behind a limit of 20 " +
		"(200 calls/s); nine quiet tenants send 10 calls/s each and one noisy tenant 200 calls/s, Poisson arrivals, the same in every " +
		"arm; a queue of 40 (failsafe-go: its default, 2 to 3 times the limit) and 1 s of patience; 30 s. Share: the least, over the " +
		"quiet tenants, of a tenant's calls answered over those it has answered without the noisy tenant in the same library's arm " +
		"(the same limit, the same arrivals).\n\n")
	r.p("| arm | quiet tenants' goodput /s (mean) | least share | quiet p99 ms | noisy goodput /s |\n|---|---:|---:|---:|---:|\n")
	for _, a := range fairArms {
		g := func(k string, digits int) string { return strconv.FormatFloat(r.fair[a.key+"_"+k], 'f', digits, 64) }
		r.p("| %s | %s | %s%% | %s | %s |\n", a.what, g("quiet_mean_per_s", 2),
			strconv.FormatFloat(100*r.fair[a.key+"_quiet_least_share"], 'f', 0, 64), g("quiet_p99_ms", 0), g("noisy_per_s", 1))
	}
	r.p("\n")
}

// fairTargets adds the fair share simulation's target to the targets
// table, if its JSON was found.
func (r report) fairTargets() {
	if r.fair == nil {
		return
	}
	share := r.fair["ours-fair_quiet_least_share"]
	r.check("fair share (simulation): nine quiet tenants beside one sending 20 times as much", "each quiet tenant >= 90% of its goodput alone",
		fmt.Sprintf("%.0f%% (first come first served: %.0f%%; failsafe-go: %.0f%%)", 100*share,
			100*r.fair["ours-fifo_quiet_least_share"], 100*r.fair["failsafe-fair_quiet_least_share"]), share >= 0.9)
}
