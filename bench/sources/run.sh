#!/usr/bin/env bash
# Floods one `mcpaudit serve` (a fresh data dir, memory_limit 256MiB) with
# 30,000 one-call requests each under its own Mcpaudit-Source, then
# measures /api/v1/status (size, time), partitions.json, serve's CPU over
# 30 s of quiet and one poster's one-call request rate for 20 s
# (docs/benchmarks.md, "A source per request"). Run it for two builds in
# turns (before, after, after, before).
#
#   bench/sources/run.sh MCPAUDIT_BINARY LABEL [DIR]   (DIR default /tmp/mcpaudit-sources)
#
# Uses ports 26318 (ingest) and 26464 (API) on 127.0.0.1; needs curl, bc
# and python3.
set -u
BIN=$1; LABEL=$2
D=${3:-/tmp/mcpaudit-sources}/run-$LABEL   # DIR: an absolute path
mkdir -p "$(dirname "$D")"
FLOOD=$(dirname "$D")/flood
(cd "$(dirname "$0")/flood" && go build -o "$FLOOD" .) || exit 1
rm -rf $D; mkdir -p $D/data
cat > $D/config.yaml <<EOC
serve:
  ingest_listen: 127.0.0.1:26318
  grpc_listen: ""
  api_listen: 127.0.0.1:26464
  data_dir: $D/data
  memory_limit: 256MiB
EOC
$BIN serve --config $D/config.yaml >$D/serve.log 2>&1 &
PID=$!
for i in $(seq 100); do curl -sf http://127.0.0.1:26464/readyz >/dev/null && break; sleep 0.2; done
echo "== $LABEL bin=$BIN pid=$PID start=$(date -u +%H:%M:%S) load: $(uptime | sed 's/.*average: //')"
$FLOOD -addr 127.0.0.1:26318 -mode sources -n 30000 -workers 8 -tag $LABEL
sleep 3
curl -s -o $D/status.json -w "status: %{size_download} bytes in %{time_total} s\n" http://127.0.0.1:26464/api/v1/status
curl -s -o $D/status2.json -w "status again: %{size_download} bytes in %{time_total} s\n" http://127.0.0.1:26464/api/v1/status
sleep 5
echo "partitions.json: $(stat -c %s $D/data/partitions.json) bytes"
TCK=$(getconf CLK_TCK)
a=$(awk '{print $14+$15}' /proc/$PID/stat); sleep 30; b=$(awk '{print $14+$15}' /proc/$PID/stat)
echo "idle CPU over 30 s: $(echo "scale=1; ($b-$a)*100/$TCK/30" | bc) % of a core ($(date -u +%H:%M:%S), load: $(uptime | sed 's/.*average: //'))"
$FLOOD -addr 127.0.0.1:26318 -mode one -dur 20s -tag $LABEL-one
curl -s http://127.0.0.1:26464/metrics | grep -E "^mcpaudit_pipeline_(source_overflow_calls_total|sources_displaced_total|sources)" 
python3 - $D/status.json <<'EOP'
import json,sys
s=json.load(open(sys.argv[1]))
for p in s["partitions"]:
    print("partition", p["server"], "sources listed", len(p["sources"]), "calls", p["calls"], "buffered", p["buffered"], "overflow_calls", p.get("overflow_calls"), "sources_displaced", p.get("sources_displaced"), "too_late", p["too_late"])
EOP
kill -TERM $PID; wait $PID
echo "end=$(date -u +%H:%M:%S) load: $(uptime | sed 's/.*average: //')"
