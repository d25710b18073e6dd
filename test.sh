#!/usr/bin/env bash
# Runs every check and test of every module in this repository: gofmt, go vet,
# go test -short over every module (under -race for all but the LLM example,
# see below), then every fuzz target for FUZZTIME each (default 2s here; see
# fuzz.sh). Usage: ./test.sh  (from the repository root).
#
# Tests that need a real server start their own: redis-server (the redisstate
# module) and prometheus (the telemetry example's dashboard check), both
# Debian packages. Without them those tests are skipped, and this script says
# so at the end; .ci/run installs them and makes their absence a failure
# (WATERTIGHT_REQUIRE_REDIS=1, WATERTIGHT_REQUIRE_PROMETHEUS=1).
#
# Longer runs, not part of CI:
#   go test -run Soak -count=1 ./internal/reliability/   # the full soak: 1 000 000 calls
#   FUZZTIME=60s ./fuzz.sh                               # long fuzzing
#   go test -run TestModel -count=1 ./bulkhead/ ./breaker/ -rapid.checks=10000
#   RACE_ALL=1 ./test.sh                                 # the LLM example under -race too (3 GB)
set -euo pipefail
cd "$(dirname "$0")"
start=$SECONDS
step() { printf '== [%4ds] %s\n' $((SECONDS - start)) "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# The simulations skip under -short and -race: they are bench/run.sh's.
skipped=("the bench simulations (TestSimAdaptive, TestSimAttempts): cd bench && go test -count=1 -run '^TestSim' -v .")
failed=()
if ! command -v redis-server >/dev/null 2>&1; then
	[ "${WATERTIGHT_REQUIRE_REDIS:-0}" = 1 ] && { echo "redis-server not found and WATERTIGHT_REQUIRE_REDIS=1" >&2; exit 1; }
	skipped+=("redisstate's tests against a real Redis: install redis-server (Debian: sudo apt-get update && sudo apt-get install -y redis-server)")
fi
if ! command -v prometheus >/dev/null 2>&1; then
	[ "${WATERTIGHT_REQUIRE_PROMETHEUS:-0}" = 1 ] && { echo "prometheus not found and WATERTIGHT_REQUIRE_PROMETHEUS=1" >&2; exit 1; }
	skipped+=("the Grafana dashboard check against a real Prometheus: install prometheus (Debian: sudo apt-get update && sudo apt-get install -y prometheus)")
fi

# Every module: the library at the root, and nested modules (examples, bench,
# integrations).
for mod in $(find . -name go.mod -not -path './.git/*' | sort); do
	dir=$(dirname "$mod")
	race=-race
	envs=()
	if [ "$dir" = ./examples/llm ] && [ "${RACE_ALL:-0}" != 1 ]; then
		# The LLM example compiles openai-go and anthropic-sdk-go: under
		# -race one compile peaked at 2.6 GB, and the race detector in two
		# large SDKs proves little about our code (the library and every
		# other module run under -race). GOGC=25 trades compile time for a
		# lower peak in the compiler itself.
		race=
		envs=(GOGC=25)
		step "$dir: compiling the LLM SDKs takes a few minutes on a cold build cache"
	fi
	# A failing module does not stop the others: every failure is listed
	# at the end.
	step "$dir: go vet"
	(cd "$dir" && env ${envs[@]+"${envs[@]}"} go vet ./...) || failed+=("$dir: go vet")
	step "$dir: go test ${race:-(no -race)} -short"
	(cd "$dir" && env ${envs[@]+"${envs[@]}"} go test $race -short -count=1 -timeout 10m ./...) || failed+=("$dir: go test")
done
step "fuzzing"
FUZZTIME=${FUZZTIME:-2s} ./fuzz.sh || failed+=("fuzz.sh")
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
