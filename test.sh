#!/usr/bin/env bash
# Runs every check and test of every module in this repository: gofmt, go vet,
# go test -race -short, then every fuzz target for FUZZTIME each (default 2s
# here; see fuzz.sh). Usage: ./test.sh  (from the repository root).
#
# Longer runs, not part of CI:
#   go test -run Soak -count=1 ./internal/reliability/   # the full soak: 1 000 000 calls
#   FUZZTIME=60s ./fuzz.sh                               # long fuzzing
#   go test -run TestModel -count=1 ./bulkhead/ ./breaker/ -rapid.checks=10000
set -euo pipefail
cd "$(dirname "$0")"

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# Every module: the library at the root, and nested modules (examples, bench).
for mod in $(find . -name go.mod -not -path './.git/*' | sort); do
	dir=$(dirname "$mod")
	echo "== $dir"
	(cd "$dir" && go vet ./... && go test -race -short -count=1 -timeout 10m ./...)
done
FUZZTIME=${FUZZTIME:-2s} ./fuzz.sh
echo "all tests passed"
