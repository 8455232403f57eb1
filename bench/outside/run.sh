#!/usr/bin/env bash
# The outside pass (docs/benchmarks.md, "out48"): `mcpaudit serve` on the
# embedded store, fed by real clients (three OpenTelemetry SDK
# TracerProviders per server, one lagging with a skewed clock; the go-sdk
# client through `mcpaudit proxy` and `mcpaudit wrap`) that make every
# failure of the spec against bench/outside's MCP servers, with `kill -9`
# and a SIGTERM restart of serve under load, Prometheus (Debian's) on the
# committed deploy/prometheus/rules.yaml, then the checks: every
# acknowledged span and call stored once, /api/v1/findings against
# `mcpaudit analyze` of the stored calls, the alerts, the pages in
# headless Chromium. Takes about 8 minutes (24 with HOLD=960).
#
#   [HOLD=960] [SQLITE_CALLS=log] bench/outside/run.sh [DIR] [ACK]
#
# DIR default /tmp/mcpaudit-outside; ACK commit (default) or log
# (serve.sqlite.ack); SQLITE_CALLS sqlite (default) or log
# (serve.sqlite.calls: the calls in the segmented call logs; not with ACK
# log, which serve refuses); HOLD: seconds to keep serve and Prometheus up
# after the checks, then check the alerts again (their for: elapsed).
#
# Uses ports 21317-21318, 21364 (serve), 21380-21383 (proxies, servers),
# 21390 (Prometheus) on 127.0.0.1; with PORT_BASE=P set, P to P+7 instead
# (serve's gRPC, ingest and API, the Thegram proxy and server, the Oddlynew
# proxy and server, Prometheus), so that two passes can run side by side.
# Needs curl, jq, prometheus, chromium.
set -u
W=${1:-/tmp/mcpaudit-outside}; ACK=${2:-commit}; CALLS=${SQLITE_CALLS:-sqlite}
case $ACK/$CALLS in
commit/sqlite | log/sqlite | commit/log) ;;
*) echo "outside: ACK commit|log and SQLITE_CALLS sqlite|log, not both log: $ACK/$CALLS" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${PORT_BASE:-}" ]; then
  read -r P_GRPC P_INGEST P_API P_PROXY_T P_SERVER_T P_PROXY_O P_SERVER_O P_PROM <<<"$(seq -s ' ' "$PORT_BASE" $((PORT_BASE + 7)))"
else
  P_GRPC=21317 P_INGEST=21318 P_API=21364 P_PROXY_T=21380 P_SERVER_T=21381 P_PROXY_O=21382 P_SERVER_O=21383 P_PROM=21390
fi
rm -rf "$W"; mkdir -p "$W/bin" "$W/data" "$W/prom" "$W/out"
(cd "$ROOT" && go build -o "$W/bin/mcpaudit" ./cmd/mcpaudit && go build -o "$W/bin/outside" ./bench/outside) || exit 1
export TMPDIR=$W  # Chromium's profile, the proxies' and wraps' scratch
M=$W/bin/mcpaudit; O=$W/bin/outside; API=http://127.0.0.1:$P_API; PROM=http://127.0.0.1:$P_PROM
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; [ -n "${SERVE:-}" ] && kill "$SERVE" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$W/events.log"; }

cat > "$W/mcpaudit.yaml" <<EOC
detect:
  verify_window: 2m
serve:
  data_dir: $W/data
  ingest_listen: 127.0.0.1:$P_INGEST
  grpc_listen: 127.0.0.1:$P_GRPC
  api_listen: 127.0.0.1:$P_API
  sqlite: {ack: $ACK, calls: $CALLS}
EOC
start_serve() {
  "$M" serve --config "$W/mcpaudit.yaml" >>"$W/serve.log" 2>&1 &
  SERVE=$!
  for i in $(seq 600); do curl -sf $API/readyz >/dev/null && break; sleep 0.1; done
  log "serve $SERVE ready ($(curl -s $API/readyz))"
}
start_serve

cat > "$W/prom/prometheus.yml" <<EOC
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: [$ROOT/deploy/prometheus/rules.yaml]
scrape_configs:
  - job_name: mcpaudit
    static_configs: [{targets: ['127.0.0.1:$P_API']}]
EOC
prometheus --config.file="$W/prom/prometheus.yml" --storage.tsdb.path="$W/prom/data" \
  --web.listen-address=127.0.0.1:$P_PROM >"$W/prom/log" 2>&1 &
PIDS+=($!)
for i in $(seq 300); do
  [ "$(curl -s "$PROM/api/v1/query?query=up" | jq -r '.data.result[0].value[1] // empty')" = 1 ] && break; sleep 0.2
done
log "prometheus scraping"

"$O" server -dialect thegram -listen 127.0.0.1:$P_SERVER_T -slow 8s & PIDS+=($!)
"$O" server -dialect oddlynew -listen 127.0.0.1:$P_SERVER_O -slow 8s & PIDS+=($!)
"$M" proxy --listen 127.0.0.1:$P_PROXY_T --upstream http://127.0.0.1:$P_SERVER_T --server thegram-proxy-r1 \
  --collector http://127.0.0.1:$P_INGEST --response-timeout 4s --buffer-dir "$W/buf-pt" >"$W/proxy-t.log" 2>&1 &
PROXY_T=$!
"$M" proxy --listen 127.0.0.1:$P_PROXY_O --upstream http://127.0.0.1:$P_SERVER_O --server oddlynew-proxy-r1 \
  --collector http://127.0.0.1:$P_INGEST --response-timeout 4s --buffer-dir "$W/buf-po" >"$W/proxy-o.log" 2>&1 &
PROXY_O=$!
sleep 1

SINCE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "traffic starts"
"$O" traffic -grpc 127.0.0.1:$P_GRPC -http 127.0.0.1:$P_INGEST \
  -proxy-thegram http://127.0.0.1:$P_PROXY_T/mcp -proxy-oddlynew http://127.0.0.1:$P_PROXY_O/mcp \
  -wrap "$M wrap --server SERVER --collector http://127.0.0.1:$P_INGEST --buffer-dir $W/buf-w-DIALECT -- $O server -dialect DIALECT -stdio -slow 8s" \
  -rounds 4 -every 20s -lag-batch 25s -skew -15s -tag r1 -out "$W/out" 2>"$W/out/traffic.log" &
TRAFFIC=$!
sleep 30
log "kill -9 serve $SERVE"; kill -9 $SERVE; wait $SERVE 2>/dev/null
sleep 3; start_serve
sleep 30
log "SIGTERM serve $SERVE"; kill -TERM $SERVE; wait $SERVE 2>/dev/null; log "serve stopped"
start_serve
wait $TRAFFIC; log "traffic done: $(tail -1 "$W/out/traffic.log")"
kill -TERM $PROXY_T $PROXY_O; wait $PROXY_T $PROXY_O 2>/dev/null; log "proxies stopped"

# Judged, and every write's window closed (verify_window 2m).
"$M" status --api-url $API --wait 5m >"$W/status.txt" 2>&1
for i in $(seq 120); do
  P=$(curl -s $API/api/v1/status | jq '[.partitions[]?.pending_writes // 0] | add // 0')
  [ "$P" = 0 ] && break; sleep 5
done
log "pending writes: $P"
sleep 15  # two scrapes and evaluations after the last finding

# The stored calls as call records (mcpaudit export, through serve's API), and
# one read per server 10 minutes after its last call, so that analyze closes
# the windows serve closed by its clock.
"$M" export --api-url $API --out "$W/out/calls.ndjson" 2>>"$W/events.log" || log "export failed"
"$O" tail -in "$W/out/calls.ndjson" -out "$W/out/tail.ndjson" 2>>"$W/events.log"
"$M" analyze --config "$W/mcpaudit.yaml" --format json "$W/out/calls.ndjson" "$W/out/tail.ndjson" >"$W/out/analyze.json" 2>"$W/out/analyze.txt"
log "analyzed"
"$O" check -dir "$W/out" -api $API -prom $PROM -since "$SINCE" | tee "$W/check.txt"
if [ "${HOLD:-0}" -gt 0 ]; then  # the alerts with a for: (UnsafeRetries 5m, UnverifiedWrites 15m) once it has elapsed
  log "holding ${HOLD}s"; sleep "$HOLD"
  "$O" check -dir "$W/out" -api $API -prom $PROM -since "$SINCE" -what alerts | tee "$W/check-late.txt"
fi
log "done"
