#!/usr/bin/env bash
# run.sh: runs the watertight vs failsafe-go benchmarks and writes
#   out/raw.txt          go test -bench output (COUNT interleaved rounds, -cpu 2)
#   out/policies.txt     benchstat -col /lib (side by side)
#   out/telemetry.txt    benchstat -col /otel (watertight, telemetry off/on)
#   out/floors.txt       benchstat (plain)
#   out/scaling.txt      benchstat (plain), and scaling-by-lib.txt (-col /lib)
#   out/sim-adaptive.txt the output of TestSimAdaptive, the adaptive limit
#                        simulation, run once after the rounds, which also
#                        writes out/sim-adaptive.json (its figures),
#                        out/sim-adaptive-limits.csv and out/adaptive-limit.svg
#                        (the limits over time; copied to adaptive-limit.svg)
#   out/sim-attempts.txt the output of TestSimAttempts (retry budget and
#                        hedging, simulated), which writes out/sim-attempts.json
#   out/sim-priority.txt the output of TestSimPriority (priority load
#                        shedding, simulated), which writes out/sim-priority.json
#   out/sim-slow.txt     the output of TestSimSlowProvider (the breaker's slow
#                        rule, simulated), which writes out/sim-slow.json
#   out/sim-route.txt    the output of TestSimRoute (routing around a sick
#                        endpoint, simulated), which writes out/sim-route.json
#   out/sim-fair.txt     the output of TestSimFairShare (one noisy tenant,
#                        simulated), which writes out/sim-fair.json
#   out/machine.txt      the machine the rounds ran on: go version, CPU model
#                        (from /proc/cpuinfo) and core count, recorded at the
#                        start of the run
#   out/table.md         Markdown summary: the command, the machine, medians,
#                        ratios, targets, the simulation's figures and
#                        targets if out/sim-adaptive.json exists; also
#                        spliced into README.md here (README=0: not)
# Environment: COUNT (default 6), BENCHTIME (default 300ms), BENCH (default .),
# README (1: splice the report into README.md, this directory's; default 1
# for a full run, 0 for a subset), REPORT_ONLY (1: skip the runs, report on
# out/raw.txt, out/machine.txt and out/sim-adaptive.json), SIM (0: skip the
# simulation, and leave it out of the report; default 1).
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6}
BENCHTIME=${BENCHTIME:-300ms}
BENCH=${BENCH:-.}
export PATH="$(go env GOPATH)/bin:$PATH"

if ! command -v benchstat >/dev/null 2>&1; then
	echo "installing benchstat" >&2
	go install golang.org/x/perf/cmd/benchstat@latest
fi

mkdir -p out
if [ "${REPORT_ONLY:-0}" = 1 ]; then
	echo "REPORT_ONLY=1: reporting on the existing out/raw.txt" >&2
	LOADAVG_START=$(cat out/loadavg-start 2>/dev/null || echo unknown)
	LOADAVG_END=$(cat out/loadavg-end 2>/dev/null || echo unknown)
	COUNT=$(grep -c '^BenchmarkFloor/op=gobreaker' out/raw.txt || true)
	export LOADAVG_START LOADAVG_END COUNT
else
	LOADAVG_START=$(cut -d' ' -f1-3 /proc/loadavg)
	export LOADAVG_START COUNT

	# The machine, recorded now so that a later REPORT_ONLY=1 run reports
	# the machine the rounds ran on, not its own.
	{
		echo "go: $(go version)"
		echo "cpu: $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | sed -n 1p)"
		echo "cores: $(nproc)"
		echo "command: cd bench && COUNT=$COUNT BENCHTIME=$BENCHTIME BENCH='$BENCH' SIM=${SIM:-1} ./run.sh"
	} >out/machine.txt
	cat out/machine.txt >&2

	# The suite runs COUNT times, each benchmark once per round, rather than
	# each benchmark COUNT times in a row: on a shared machine a slow spell then
	# spreads over every benchmark instead of landing on one, and the ratios
	# (watertight to failsafe-go, to the floors) compare runs made moments apart.
	echo "bench.test -test.bench=$BENCH -test.benchtime=$BENCHTIME -test.cpu 2, $COUNT interleaved rounds (load average $LOADAVG_START)" >&2
	go test -c -o out/bench.test .
	# The route package's own benchmark times the pick alone (unexported).
	(cd .. && go test -c -o bench/out/route.test ./route)
	: >out/raw.txt
	for round in $(seq 1 "$COUNT"); do
		echo "round $round of $COUNT" >&2
		./out/bench.test -test.run='^$' -test.bench="$BENCH" -test.benchmem -test.count=1 \
			-test.benchtime="$BENCHTIME" -test.cpu 2 -test.timeout 30m | tee -a out/raw.txt >&2
		if [ "$BENCH" = . ] || echo BenchmarkPick | grep -qE -- "$BENCH"; then
			./out/route.test -test.run='^$' -test.bench='^BenchmarkPick$' -test.benchmem -test.count=1 \
				-test.benchtime="$BENCHTIME" -test.cpu 2 | tee -a out/raw.txt >&2
		fi
	done
	rm -f out/bench.test out/route.test
	LOADAVG_END=$(cut -d' ' -f1-3 /proc/loadavg)
	export LOADAVG_END
	echo "$LOADAVG_START" >out/loadavg-start
	echo "$LOADAVG_END" >out/loadavg-end

	# The adaptive limit simulation runs once, after the rounds (it keeps
	# both cores busy for a few seconds, which the load averages above do
	# not include). It runs in simulated time (testing/synctest), so its
	# figures do not depend on the machine's speed; they vary a little from
	# run to run, since calls due at the same simulated instant run in no
	# fixed order.
	rm -f out/sim-adaptive.json out/sim-attempts.json out/sim-priority.json out/sim-slow.json out/sim-route.json out/sim-fair.json
	if [ "${SIM:-1}" != 0 ]; then
		echo "TestSimAdaptive (adaptive limit simulation)" >&2
		go test -count=1 -run '^TestSimAdaptive$' -v . | tee out/sim-adaptive.txt >&2
		echo "TestSimAttempts (retry budget and hedging simulation)" >&2
		go test -count=1 -run '^TestSimAttempts$' -v . | tee out/sim-attempts.txt >&2
		echo "TestSimPriority (priority load shedding simulation)" >&2
		go test -count=1 -run '^TestSimPriority$' -v . | tee out/sim-priority.txt >&2
		echo "TestSimSlowProvider (slow-call rule simulation)" >&2
		go test -count=1 -run '^TestSimSlowProvider$' -v . | tee out/sim-slow.txt >&2
		echo "TestSimRoute (routing around a sick endpoint, simulation)" >&2
		go test -count=1 -run '^TestSimRoute$' -v . | tee out/sim-route.txt >&2
		echo "TestSimFairShare (one noisy tenant, simulation)" >&2
		go test -count=1 -run '^TestSimFairShare$' -v . | tee out/sim-fair.txt >&2
	fi
fi

# subset NAME REGEX: the header lines and the benchmarks matching REGEX.
subset() {
	{
		grep -E '^(goos|goarch|pkg|cpu):' out/raw.txt | sort -u
		grep -E "$2" out/raw.txt || true
	} >"out/$1.raw"
}
subset policies '^Benchmark(Bulkhead|Timeout|Retry|Breaker|Composed|Reject)'
subset telemetry '^BenchmarkTelemetry/'
subset floors '^BenchmarkFloor/'
subset scaling '^BenchmarkScale'

benchstat -col /lib out/policies.raw >out/policies.txt
benchstat -col /otel out/telemetry.raw >out/telemetry.txt
benchstat out/floors.raw >out/floors.txt
benchstat out/scaling.raw >out/scaling.txt
benchstat -col /lib out/scaling.raw >out/scaling-by-lib.txt
rm -f out/*.raw

# The report: benchtable's tables, with the command that reproduces them
# and the machine they ran on (out/machine.txt) after its title.
machine() {
	local v
	v=$(sed -n "s/^$1: //p" out/machine.txt 2>/dev/null | sed -n 1p)
	echo "${v:-unknown}"
}
go run ./cmd/benchtable out/raw.txt >out/table.body.md
{
	sed -n 1p out/table.body.md
	echo
	echo "Command: \`$(machine command)\`."
	echo
	echo "Run on: $(machine cpu), $(machine cores) cores, $(machine go)."
	sed -n '2,$p' out/table.body.md
} >out/table.md
rm -f out/table.body.md
cat out/table.md

# With README=1, the report replaces what stands between the markers
# <!-- bench:begin --> and <!-- bench:end --> in README.md (this
# directory's; its title dropped, its sections demoted one level to fit
# under "The latest full run"), so that the figures there are always a
# real run's.
README=${README:-$([ "$BENCH" = . ] && echo 1 || echo 0)}
if [ "$README" != 0 ] && grep -q '<!-- bench:begin -->' README.md; then
	awk -v table=out/table.md '
		/<!-- bench:begin -->/ {
			print
			first = 1
			while ((getline line < table) > 0) {
				if (first) { first = 0; continue }
				sub(/^## /, "### ", line)
				print line
			}
			skip = 1
			next
		}
		/<!-- bench:end -->/ { skip = 0 }
		!skip
	' README.md >out/README.md.new
	mv out/README.md.new README.md
	echo "updated README.md between the bench markers" >&2
fi
