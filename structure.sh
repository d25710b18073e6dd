#!/usr/bin/env bash
# Reports the library's structure: non-test lines per package of the root
# module (the examples excepted), the functions over 25 in gocyclo, init
# functions, and every direct import of the root module's internal/
# packages from a nested module (grpcpolicy, redisstate), which must use
# the public API only. ./test.sh runs it at the end.
# Usage: ./structure.sh  (from the repository root). It fails if a
# function of any module (tests excepted) is over 25 in gocyclo; the rest
# it reports.
set -euo pipefail
cd "$(dirname "$0")"

echo "non-test lines per package of the root module:"
total=0
for pkg in $(go list ./... | grep -v /examples/); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	n=$(cd "$dir" && go list -f '{{join .GoFiles "\n"}}' . | xargs cat | wc -l)
	total=$((total + n))
	printf '  %6d %s\n' "$n" "${pkg#github.com/watertight/watertight}"
done
printf '  %6d total\n' "$total"

echo "functions over 25 in gocyclo (every module, non-test):"
# gocyclo exits 1 when it lists any.
# shellcheck disable=SC2046
over=$(go run github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0 -over 25 $(git ls-files '*.go' | grep -v '_test\.go$') 2>/dev/null || true)
echo "${over:-none}" | sed 's/^/  /'
status=0
[ -z "$over" ] || status=1

echo "init functions:"
grep -rn '^func init' --include=*.go . | grep -v '_test\.go:' | sed 's/^/  /' || echo "  none"

echo "direct imports of the root module's internal/ from nested modules:"
for mod in grpcpolicy redisstate statuspage; do
	[ -f "$mod/go.mod" ] || continue
	(cd "$mod" && go list -f '{{.ImportPath}}: {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
		tr ' ' '\n' | grep -o 'github.com/watertight/watertight/internal/[a-z]*' | sort -u | sed "s|^|  $mod: |") || true
done
exit $status
