#!/usr/bin/env bash
# jaeger.sh: send the telemetry example's spans to a real Jaeger, without
# Docker, and ask Jaeger's HTTP API for them.
#
# 1. Builds Jaeger's all-in-one binary (github.com/jaegertracing/jaeger/cmd/jaeger)
#    from its module source, once: `go install ...@version` does not work,
#    because Jaeger's go.mod has replace directives, but a build inside the
#    downloaded module does. It takes minutes and about 2 GB of memory; the
#    binary is kept in $JAEGER_BIN for the next run.
# 2. Starts it (in-memory storage; OTLP/HTTP on 4318, UI and API on 16686)
#    and stops it by its PID on exit.
# 3. Runs `go run .` with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it.
# 4. Queries /api/services and /api/traces and prints the span count per
#    operation; fails if a pipeline's spans are missing.
#
# For running by hand; CI does not run it. Usage, from anywhere:
#
#   examples/telemetry/jaeger.sh            # build if needed, run, query
#   JAEGER_KEEP=1 examples/telemetry/jaeger.sh   # leave Jaeger running for its UI
#
# Environment: JAEGER_VERSION (default v1.75.0), JAEGER_BIN (default
# ${XDG_CACHE_HOME:-~/.cache}/watertight/jaeger-$JAEGER_VERSION),
# JAEGER_OTLP_PORT (4318), JAEGER_UI_PORT (16686).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${JAEGER_VERSION:-v1.75.0}
bin=${JAEGER_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/watertight/jaeger-$version}
otlp_port=${JAEGER_OTLP_PORT:-4318}
ui_port=${JAEGER_UI_PORT:-16686}
service=watertight-jaeger-demo
api=http://127.0.0.1:$ui_port

for tool in go curl; do
	command -v "$tool" >/dev/null || { echo "jaeger.sh: $tool is needed" >&2; exit 1; }
done

if [[ ! -x $bin ]]; then
	echo "== building jaeger $version from its module source into $bin (minutes, ~2 GB of memory)"
	# Outside any module, so that the download does not touch a go.mod.
	tmp=$(mktemp -d)
	dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@$version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	rmdir "$tmp"
	[[ -n $dir && -d $dir ]] || { echo "jaeger.sh: go mod download gave no directory" >&2; exit 1; }
	mkdir -p "$(dirname "$bin")"
	# The module cache is read-only; the build writes only $bin and the
	# build cache. GOFLAGS is cleared so that a user's -mod=vendor or the
	# like does not apply to Jaeger's module.
	(cd "$dir" && GOFLAGS= go build -o "$bin.tmp" ./cmd/jaeger)
	mv "$bin.tmp" "$bin"
fi

log=$(mktemp -t jaeger.XXXXXX.log)
echo "== starting $bin (log: $log)"
"$bin" >"$log" 2>&1 &
jaeger_pid=$!
stop() {
	if [[ -z ${JAEGER_KEEP:-} ]]; then
		kill "$jaeger_pid" 2>/dev/null && wait "$jaeger_pid" 2>/dev/null || true
	else
		echo "== Jaeger left running (pid $jaeger_pid): UI at $api, stop it with: kill $jaeger_pid"
	fi
}
trap stop EXIT

for _ in $(seq 1 100); do
	if curl -fsS "$api/api/services" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$jaeger_pid" 2>/dev/null; then
		echo "jaeger.sh: jaeger exited:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	sleep 0.3
done
curl -fsS "$api/api/services" >/dev/null || { echo "jaeger.sh: Jaeger's API did not answer on $api" >&2; exit 1; }

echo "== go run . with OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$otlp_port"
(cd "$here" && OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$otlp_port OTEL_SERVICE_NAME=$service \
	go run . -addr 127.0.0.1:0 >/dev/null)

# Jaeger's memory store indexes spans as they arrive; give it a moment.
traces=""
for _ in $(seq 1 50); do
	traces=$(curl -fsS "$api/api/traces?service=$service&limit=1000")
	if grep -q '"operationName":"watertight down"' <<<"$traces"; then
		break
	fi
	sleep 0.2
done

echo "== $api/api/services"
curl -fsS "$api/api/services"
echo
echo "== spans per operation in $api/api/traces?service=$service"
grep -o '"operationName":"[^"]*"' <<<"$traces" | sort | uniq -c

status=0
for op in "watertight storm" "watertight flaky" "watertight flaky attempt" "watertight slow" \
	"watertight slow attempt" "watertight down" "watertight down attempt"; do
	if ! grep -q "\"operationName\":\"$op\"" <<<"$traces"; then
		echo "jaeger.sh: no \"$op\" span in Jaeger" >&2
		status=1
	fi
done
if grep -q '"key":"watertight.breaker.from"' <<<"$traces"; then
	echo "== the breaker's transition event is there, with watertight.breaker.from"
else
	echo "jaeger.sh: no breaker transition event in Jaeger" >&2
	status=1
fi
exit $status
