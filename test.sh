#!/usr/bin/env bash
# Runs every check and test of every module in this repository: gofmt, go vet,
# go test -short over every module (the library, grpcpolicy and redisstate
# under -race; see below). Every fuzz target's seed corpus runs as a test
# here; fuzzing for new inputs is ./fuzz.sh, which CI (.ci/run) runs after
# this script. Usage: ./test.sh  (from the repository root).
#
# Tests that need a real server start their own: redis-server (the redisstate
# module) and prometheus (the telemetry example's dashboard and alert
# checks); the statuspage example's test drives a headless chromium. All
# three are Debian packages. Without them those tests are skipped, and this
# script says so at the end; .ci/run installs them and makes their absence
# a failure (WATERTIGHT_REQUIRE_REDIS=1, WATERTIGHT_REQUIRE_PROMETHEUS=1,
# WATERTIGHT_REQUIRE_CHROMIUM=1).
#
# Longer runs:
#   FUZZTIME=2s ./fuzz.sh                                # every fuzz target, as CI runs it
#   FUZZTIME=60s ./fuzz.sh                               # long fuzzing
#   go test -run Soak -count=1 ./internal/reliability/   # the full soak: 1 000 000 calls
#   go test -run TestModel -count=1 ./bulkhead/ ./breaker/ -rapid.checks=10000
#   RACE_ALL=1 ./test.sh                                 # bench and the examples under -race too (the LLM example's compile: 2.6 GB)
set -euo pipefail
cd "$(dirname "$0")"
# The time elapsed from the start, also in the background job below (a
# subshell starts its own SECONDS).
start=$(date +%s)
step() { printf '== [%4ds] %s\n' $(($(date +%s) - start)) "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# Docs speak about the code as it is, not about how it was built: process
# wording in README.md, CONTRIBUTING.md, doc/, doc.go files, Go comments or
# test file names fails the run (at the end, with the other failures).
step "process wording"
wording='not met|found by review|by review|previous (run|session)|earlier (run|session)|review round|reviewer|\breview\b|\bissue [0-9]+'
process_hits=$(
	{
		git ls-files README.md CONTRIBUTING.md doc '*doc.go' | xargs -r grep -HniE "$wording"
		git ls-files '*.go' | xargs -r grep -HnE "//.*" | grep -iE "^[^:]+:[0-9]+:.*//.*($wording)"
		git ls-files '*_test.go' | grep -iE 'review|session|not_?met|previous_?run|earlier_?run'
	} 2>/dev/null | sort -u || true
)
if [ -n "$process_hits" ]; then
	echo "process wording (say what the code does instead):" >&2
	echo "$process_hits" >&2
fi

# The simulations skip under -short and -race: they are bench/run.sh's.
skipped=("the bench simulations (TestSimAdaptive, TestSimAttempts, TestSimPriority, TestSimSlowProvider, TestSimRoute, TestSimFairShare): cd bench && go test -count=1 -run '^TestSim' -v ."
	"fuzzing for new inputs (every target's seed corpus ran as a test; CI fuzzes each target for 2 s): FUZZTIME=2s ./fuzz.sh")
failed=()
[ -n "$process_hits" ] && failed+=("process wording in the docs, Go comments or test file names (listed above)")
if ! command -v redis-server >/dev/null 2>&1; then
	[ "${WATERTIGHT_REQUIRE_REDIS:-0}" = 1 ] && { echo "redis-server not found and WATERTIGHT_REQUIRE_REDIS=1" >&2; exit 1; }
	skipped+=("redisstate's tests against a real Redis: install redis-server (Debian: sudo apt-get update && sudo apt-get install -y redis-server)")
fi
if ! command -v prometheus >/dev/null 2>&1; then
	[ "${WATERTIGHT_REQUIRE_PROMETHEUS:-0}" = 1 ] && { echo "prometheus not found and WATERTIGHT_REQUIRE_PROMETHEUS=1" >&2; exit 1; }
	skipped+=("the Grafana dashboard and alerting rules checks against a real Prometheus and promtool: install prometheus (Debian: sudo apt-get update && sudo apt-get install -y prometheus)")
fi
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	[ "${WATERTIGHT_REQUIRE_CHROMIUM:-0}" = 1 ] && { echo "chromium not found and WATERTIGHT_REQUIRE_CHROMIUM=1" >&2; exit 1; }
	skipped+=("the status page's check in a real browser (examples/statuspage): install chromium (Debian: sudo apt-get update && sudo apt-get install -y chromium)")
fi

# Every module: the library at the root, and nested modules (examples, bench,
# integrations). The library and its integrations (grpcpolicy, redisstate,
# statuspage) run under -race; bench and the examples do not: their own code is set-up
# and load generation around the library, whose packages (the loginstorm
# demo included, which lives in the root module) are race-tested in their
# module, and the simulations skip under -race anyway. Compiling their
# dependencies a second time with the race detector (failsafe-go and the
# OpenTelemetry SDK for bench, the Prometheus exporter for the telemetry
# example, two large SDKs for the LLM example: under -race one compile of
# those peaked at 2.6 GB) cost minutes on a cold cache and proved nothing
# about our code. RACE_ALL=1 runs every module under -race.
#
# go vet runs with the module's own build flags (-race where the tests use
# it): it then type-checks against the very compiles go test links, where a
# plain go vet would compile every dependency once more without -race.
# go test then runs with -vet=off: the analyzers it would run are a subset
# of those go vet has just run on the same packages, test files included,
# and under go test they would compute every dependency's vet facts (the
# standard library's included) a second time.
#
# The modules run in lanes at the same time, each lane one module after
# the other, the foreground's output first and then each background
# lane's. The modules without -race form a lane in the background from
# the start, the LLM example (the longest compile) first. In the
# foreground the library's go vet -race compiles the standard library, the
# library and the dependencies the integrations share, all with the race
# detector; then the integrations (grpcpolicy, redisstate) start in a lane
# of their own while the library's tests run. Lanes with and without -race
# share no compile, and the integrations start once what they share with
# the library is in the build cache: two go commands that needed the same
# compile at the same time would each do it, as the cache holds a package
# only once its compile has ended. While one lane waits on tests that
# mostly sleep (real servers, timers, network round trips), the others
# keep both cores busy. TEST_JOBS=1 runs every module in turn in the
# foreground instead.
#
# The LLM example compiles openai-go and anthropic-sdk-go, each one package
# of a size that took its compiler to 2.5 GB and 85 s of CPU. The example's
# tests check our code around the SDKs, not the SDKs' machine code or debug
# information, so the SDKs' packages are compiled without optimization or
# inlining (-N -l: about half the CPU) and without DWARF (-dwarf=false:
# about 250 MB less per compile, and less CPU). The module runs with
# GOMEMLIMIT=1300MiB: the compiler's garbage collector keeps its default
# pace until a compile nears 1.3 GB, then collects more often (about 1.35
# GB for anthropic-sdk-go; GOGC=50 throughout cost more CPU for 1.27 GB,
# and optimized compiles peaked at 2.08 GB even with GOGC=25).
llm_gcflags=(-gcflags='github.com/openai/openai-go/v3/...=-N -l -dwarf=false' -gcflags='github.com/anthropics/anthropic-sdk-go/v2/...=-N -l -dwarf=false')
llm_env=(GOMEMLIMIT=1300MiB)
vet_module() {
	local dir=$1 race=$2 flags=() envs=()
	[ -n "$race" ] && flags+=("$race")
	[ "$dir" = ./examples/llm ] && flags+=("${llm_gcflags[@]}") && envs+=("${llm_env[@]}")
	# A failing module does not stop the others: every failure is listed
	# at the end.
	step "$dir: go vet ${flags[*]:-}"
	(cd "$dir" && env ${envs[@]+"${envs[@]}"} go vet ${flags[@]+"${flags[@]}"} ./...) || { echo "FAILED: $dir: go vet" >>"$failures"; }
}
test_module() {
	local dir=$1 race=$2 flags=() envs=()
	[ -n "$race" ] && flags+=("$race")
	[ "$dir" = ./examples/llm ] && flags+=("${llm_gcflags[@]}") && envs+=("${llm_env[@]}")
	step "$dir: go test ${race:-(no -race)} -short -vet=off (vetted above)"
	(cd "$dir" && env ${envs[@]+"${envs[@]}"} go test ${flags[@]+"${flags[@]}"} -vet=off -short -count=1 -timeout 10m ./...) || { echo "FAILED: $dir: go test" >>"$failures"; }
}
run_lane() {
	local dir
	for dir in "$@"; do
		vet_module "$dir" "$(race_for "$dir")"
		test_module "$dir" "$(race_for "$dir")"
	done
}
failures=$(mktemp)
plain_log=$(mktemp)
integrations_log=$(mktemp)
trap 'rm -f "$failures" "$plain_log" "$integrations_log"' EXIT
race_for() {
	case "$1" in
	. | ./grpcpolicy | ./redisstate | ./statuspage) echo -race ;;
	*) [ "${RACE_ALL:-0}" = 1 ] && echo -race || echo "" ;;
	esac
}
# The modules under -race, the library (.) first, and the others with the
# LLM example first.
race_mods=() plain_mods=()
for mod in $(find . -name go.mod -not -path './.git/*' | sort); do
	dir=$(dirname "$mod")
	if [ "$dir" = . ]; then
		race_mods=("$dir" ${race_mods[@]+"${race_mods[@]}"})
	elif [ -n "$(race_for "$dir")" ]; then
		race_mods+=("$dir")
	elif [ "$dir" = ./examples/llm ]; then
		plain_mods=("$dir" ${plain_mods[@]+"${plain_mods[@]}"})
	else
		plain_mods+=("$dir")
	fi
done
plain_pid= integrations_pid=
if [ "${TEST_JOBS:-2}" = 1 ] || [ ${#race_mods[@]} -eq 0 ]; then
	run_lane ${race_mods[@]+"${race_mods[@]}"} ${plain_mods[@]+"${plain_mods[@]}"}
else
	if [ ${#plain_mods[@]} -gt 0 ]; then
		step "started in the background: ${plain_mods[*]}"
		run_lane "${plain_mods[@]}" >"$plain_log" 2>&1 &
		plain_pid=$!
	fi
	library=${race_mods[0]}
	vet_module "$library" "$(race_for "$library")"
	if [ ${#race_mods[@]} -gt 1 ]; then
		step "started in the background: ${race_mods[*]:1}"
		run_lane "${race_mods[@]:1}" >"$integrations_log" 2>&1 &
		integrations_pid=$!
	fi
	test_module "$library" "$(race_for "$library")"
fi
# structure.sh runs while the background lanes may still be running.
step "structure: ./structure.sh"
./structure.sh || echo "FAILED: ./structure.sh (a function over 25 in gocyclo)" >>"$failures"
for lane in integrations plain; do
	pid_var=${lane}_pid log_var=${lane}_log
	[ -n "${!pid_var}" ] || continue
	step "waiting for the background lane: $lane"
	wait "${!pid_var}" || true
	cat "${!log_var}"
done
while read -r f; do
	failed+=("${f#FAILED: }")
done <"$failures"
for s in "${skipped[@]}"; do
	echo "SKIPPED: $s"
done
if [ ${#failed[@]} -gt 0 ]; then
	for f in ${failed[@]+"${failed[@]}"}; do
		echo "FAILED: $f" >&2
	done
	exit 1
fi
step "all tests passed"
