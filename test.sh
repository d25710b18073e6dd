#!/usr/bin/env bash
# Runs every check and test of every module in this repository: gofmt, go vet,
# and go test -race. Usage: ./test.sh  (from the repository root).
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
	(cd "$dir" && go vet ./... && go test -race -count=1 -timeout 10m ./...)
done
echo "all tests passed"
