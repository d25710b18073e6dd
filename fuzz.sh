#!/usr/bin/env bash
# Runs every Go fuzz target in this repository (found with grep, so new ones
# are picked up) for FUZZTIME each (default 3s). Usage:
#   ./fuzz.sh                       # 3s per target
#   FUZZTIME=60s ./fuzz.sh          # a longer run
#   ./fuzz.sh ./bulkhead            # only the targets under some directories
#   FUZZ_MODULES=. ./fuzz.sh        # only the targets of some modules (by
#                                   # directory, space-separated; . is the
#                                   # library's own module)
# CI (.ci/run) runs FUZZTIME=2s ./fuzz.sh after ./test.sh, which runs every
# target's seed corpus as a test but does not fuzz.
# Fuzzing builds every package of a target's test binary, the standard
# library included, with coverage instrumentation: a cold build cache pays
# that once per module, so each package's binary is built once
# (go test -c -fuzz) and runs each of its targets, where go test -fuzz would
# link one binary per target.
# New interesting inputs go to the Go build cache ($(go env GOCACHE)/fuzz),
# not to testdata: copy a failing input from testdata/fuzz/<Fuzz>/ (where the
# test writes it) into the corpus you commit.
set -euo pipefail
cd "$(dirname "$0")"

fuzztime=${FUZZTIME:-3s}
roots=("${@:-.}")
gocache=$(go env GOCACHE)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

failed=0
flaked=0
count=0
start=$SECONDS

# fuzz_one runs target $2 of the package in directory $1 from binary $3.
fuzz_one() {
	local dir=$1 name=$2 test=$3 importpath=$4 out ok=1 try
	echo "== $name in $dir ($fuzztime)"
	for try in 1 2; do
		if out=$(cd "$dir" && "$test" -test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$fuzztime" \
			-test.fuzzcachedir="$gocache/fuzz/$importpath" -test.paniconexit0 -test.timeout=10m 2>&1); then
			ok=1
			break
		fi
		ok=0
		# Go 1.26's fuzz coordinator can fail a target with a bare "context
		# deadline exceeded" when -fuzztime ends while a worker is busy
		# (go.dev/issue/75804, fixed in Go 1.27): nothing found, no input
		# written. Such a run is tried once more; a run that wrote a failing
		# input, or failed any other way, fails at once.
		if grep -q 'Failing input written' <<<"$out" || ! grep -q '^    context deadline exceeded$' <<<"$out"; then
			break
		fi
		echo "   $name: 'context deadline exceeded' with no failing input (go.dev/issue/75804)$([ "$try" = 1 ] && echo ', trying again')"
		ok=2
	done
	if [ "$ok" = 2 ]; then
		echo "   $name: the fuzz coordinator's deadline race twice, no input found: not counted as a failure"
		flaked=$((flaked + 1))
	elif [ "$ok" = 0 ]; then
		echo "$out"
		echo "FAIL: $name in $dir" >&2
		failed=$((failed + 1))
	else
		# The last progress line: execs and new inputs.
		echo "$out" | grep -E '^fuzz: elapsed' | tail -1 || true
	fi
}

# Targets as "dir name" lines, sorted so that a package's targets are
# adjacent.
targets=$(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]*\(' "${roots[@]}" |
	grep -v '/\.git/' | sed -E 's#^(.*)/[^/]*:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#' | sort -u)

prev=
test=
importpath=
while read -r dir name; do
	[ -n "$dir" ] || continue
	# The module the package belongs to: the nearest go.mod above it.
	mod=$dir
	while [ ! -f "$mod/go.mod" ]; do mod=$(dirname "$mod"); done
	if [ -n "${FUZZ_MODULES:-}" ] && ! grep -qxF "$mod" <<<"$(tr ' ' '\n' <<<"$FUZZ_MODULES")"; then
		continue
	fi
	count=$((count + 1))
	if [ "$dir" != "$prev" ]; then
		prev=$dir
		pkg=./${dir#"$mod"}
		pkg=${pkg/#.\/\//./}
		test="$bin/$count.test"
		if ! out=$(cd "$mod" && go test -c -fuzz=. -o "$test" "$pkg" 2>&1) ||
			! importpath=$(cd "$mod" && go list "$pkg"); then
			echo "$out"
			test=
		fi
	fi
	if [ -z "$test" ]; then
		echo "FAIL: $name in $dir (its test binary did not build)" >&2
		failed=$((failed + 1))
		continue
	fi
	fuzz_one "$dir" "$name" "$test" "$importpath"
done <<<"$targets"

echo "fuzzed $count targets in $((SECONDS - start))s, $failed failed, $flaked hit Go's deadline race twice"
[ "$count" -gt 0 ] && [ "$failed" -eq 0 ]
