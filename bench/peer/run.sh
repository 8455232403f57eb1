#!/usr/bin/env bash
# The peer benchmark: mcpaudit serve beside the OpenTelemetry Collector, driven with the same
# OTLP/gRPC load by mcpaudit loadgen, on this machine, with no manual step.
#
# It builds a Collector with the OpenTelemetry Collector Builder (ocb) from the Go module proxy:
# the OTLP receiver, the batch processor, the file exporter and, for the durable configuration,
# the file_storage extension and the OTLP exporter (the file exporter has no sending queue of its
# own, so the durable pipeline puts a persistent queue in front of it). Builds are cached under
# $MCPAUDIT_PEER_CACHE (default ~/.cache/mcpaudit-peer); nothing it builds is in the repository.
#
# Three servers, each run ROUNDS times, alternating:
#   mcpaudit           mcpaudit serve with its defaults but serve.sqlite.calls, which is
#                      $SQLITE_CALLS: "sqlite" (the default), each request acknowledged after its
#                      calls are committed to the embedded store (synchronous=full: the WAL synced);
#                      "log", after they are synced (fdatasync) to the segmented call log
#                      (docs/storage.md, "Calls in the call log"). Every call also judged.
#   collector-default  otlp receiver -> batch processor -> file exporter, the Collector's defaults:
#                      acknowledged once the batch processor holds the spans in memory.
#   collector-durable  otlp receiver -> otlp exporter with a persistent sending queue
#                      (file_storage with fsync: true; block_on_overflow: true; 100 requests)
#                      -> a second otlp receiver -> file exporter, in the same process: a request
#                      is acknowledged once it is fsynced in the queue; the queue drains into the
#                      file (which is not fsynced).
#
# For each run it records acknowledged spans (calls) per second, the server's CPU seconds and
# cores used, its peak RSS and its bytes on disk; for mcpaudit also how long after the load it
# had judged every call, and the calls it had stored (counted after it stopped, by `mcpaudit
# calls --data-dir`). The last line is
#   ratio default=R1 durable=R2
# where R is mcpaudit's acknowledged calls/s over the Collector's acknowledged spans/s (means
# over the rounds).
#
# Usage: bench/peer/run.sh                 (from anywhere; about 20 minutes the first time,
#                                           of which the Collector build is about 3)
#        SQLITE_CALLS=log bench/peer/run.sh     mcpaudit with serve.sqlite.calls: log
#        bench/peer/run.sh --configs-only DIR   write the configuration files to DIR and exit
# Environment: ROUNDS (3), DURATION (20s), CLIENTS (8), BATCH (512), CALLS (5000000),
#              SQLITE_CALLS (sqlite, or log), OTELCOL_VERSION (v0.161.0), MCPAUDIT_PEER_CACHE,
#              PORT_BASE (unset: ports 25017, 25018, 25064, 25117, 25119 on 127.0.0.1; set to P:
#              P to P+4, mcpaudit's gRPC, HTTP and API, the Collector's gRPC and internal
#              receiver), KEEP=1 to keep the work directory ($TMPDIR/mcpaudit-peer.*, /tmp without
#              TMPDIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20s}
CLIENTS=${CLIENTS:-8}
BATCH=${BATCH:-512}
CALLS=${CALLS:-5000000}
SQLITE_CALLS=${SQLITE_CALLS:-sqlite}
case $SQLITE_CALLS in
sqlite | log) ;;
*) echo "peer: SQLITE_CALLS is sqlite or log (serve.sqlite.calls), not \"$SQLITE_CALLS\"" >&2; exit 2 ;;
esac
# One release for every Collector module: the file exporter passes at v0.161.0 (later ones were
# not tried), and core v0.161.0 goes with the v1.67.0 modules.
OTELCOL_VERSION=${OTELCOL_VERSION:-v0.161.0}
CACHE=${MCPAUDIT_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpaudit-peer}
if [ -n "${PORT_BASE:-}" ]; then
	MCP_GRPC=$PORT_BASE MCP_HTTP=$((PORT_BASE + 1)) MCP_API=$((PORT_BASE + 2))
	COL_GRPC=$((PORT_BASE + 3)) COL_INTERNAL=$((PORT_BASE + 4))
else
	MCP_GRPC=25017 MCP_HTTP=25018 MCP_API=25064 COL_GRPC=25117 COL_INTERNAL=25119
fi

# write_configs DIR: the builder manifest, the two Collector configurations and mcpaudit's. The
# Collector's data paths and ports come from the environment when it starts (${env:...}),
# mcpaudit's from flags.
write_configs() {
	local dir=$1
	mkdir -p "$dir"
	cat >"$dir/mcpaudit.yaml" <<EOF
# mcpaudit serve's defaults but where the embedded store keeps calls (SQLITE_CALLS).
serve:
  sqlite:
    calls: $SQLITE_CALLS
EOF
	cat >"$dir/builder.yaml" <<EOF
dist:
  name: otelcol-peer
  description: OpenTelemetry Collector for the mcpaudit peer benchmark
  output_path: $dir/build
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver $OTELCOL_VERSION
processors:
  - gomod: go.opentelemetry.io/collector/processor/batchprocessor $OTELCOL_VERSION
exporters:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter $OTELCOL_VERSION
  - gomod: go.opentelemetry.io/collector/exporter/otlpexporter $OTELCOL_VERSION
extensions:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage $OTELCOL_VERSION
EOF
	cat >"$dir/otelcol-default.yaml" <<'EOF'
# The Collector's defaults: receiver -> batch -> file.
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:PEER_GRPC_PORT}
processors:
  batch: {}
exporters:
  file:
    path: ${env:PEER_DATA}/traces.json
service:
  telemetry:
    logs: {level: warn}
    metrics: {level: none}
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [file]
EOF
	cat >"$dir/otelcol-durable.yaml" <<'EOF'
# Durable, as near as this Collector comes: a request is acknowledged once it is in a persistent
# queue fsynced to disk (file_storage), which blocks rather than drops when full. The file
# exporter has no sending queue of its own, so the queue is an OTLP exporter's, feeding a second
# OTLP receiver in the same process; no batch processor after the queue, which would take spans
# off the disk into memory before they are written. wait_for_result cannot be combined with a
# persistent queue in this version. queue_size is 100 requests rather than 1000, so that a run of
# seconds measures the rate the queue drains at rather than its free space. The file exporter
# does not fsync (it flushes every second).
extensions:
  file_storage:
    directory: ${env:PEER_DATA}/queue
    create_directory: true
    fsync: true
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:PEER_GRPC_PORT}
  otlp/internal:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:PEER_INTERNAL_PORT}
exporters:
  otlp_grpc/queue:
    endpoint: 127.0.0.1:${env:PEER_INTERNAL_PORT}
    tls:
      insecure: true
    sending_queue:
      enabled: true
      storage: file_storage
      queue_size: 100
      block_on_overflow: true
    retry_on_failure:
      enabled: true
  file:
    path: ${env:PEER_DATA}/traces.json
service:
  extensions: [file_storage]
  telemetry:
    logs: {level: warn}
    metrics: {level: none}
  pipelines:
    traces/in:
      receivers: [otlp]
      exporters: [otlp_grpc/queue]
    traces/out:
      receivers: [otlp/internal]
      exporters: [file]
EOF
}

if [ "${1:-}" = "--configs-only" ]; then
	write_configs "${2:?usage: run.sh --configs-only DIR}"
	exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpaudit-peer.XXXXXX")
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ "${KEEP:-}" = 1 ]; then echo "work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
log() { echo "peer: $*" >&2; }

# The Collector, built once per version.
BUILD="$CACHE/$OTELCOL_VERSION"
OTELCOL="$BUILD/build/otelcol-peer"
write_configs "$BUILD"
if [ ! -x "$OTELCOL" ]; then
	if [ ! -x "$CACHE/bin/builder-$OTELCOL_VERSION" ]; then
		log "installing the Collector builder $OTELCOL_VERSION"
		mkdir -p "$CACHE/bin"
		GOBIN="$CACHE/bin/tmp" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
		mv "$CACHE/bin/tmp/builder" "$CACHE/bin/builder-$OTELCOL_VERSION"
	fi
	log "building the Collector $OTELCOL_VERSION (a few minutes, once)"
	(cd "$BUILD" && "$CACHE/bin/builder-$OTELCOL_VERSION" --config builder.yaml >"$BUILD/build.log" 2>&1) ||
		{ tail -30 "$BUILD/build.log" >&2; exit 1; }
fi
write_configs "$WORK"
for c in default durable; do
	PEER_DATA=$WORK PEER_GRPC_PORT=$COL_GRPC PEER_INTERNAL_PORT=$COL_INTERNAL \
		"$OTELCOL" validate --config="file:$WORK/otelcol-$c.yaml" >/dev/null
done

log "building mcpaudit"
go build -o "$WORK/mcpaudit" ./cmd/mcpaudit
"$WORK/mcpaudit" config validate "$WORK/mcpaudit.yaml" >/dev/null

# port_free PORT: nothing listens on 127.0.0.1:PORT yet (another run, another service).
port_free() {
	if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
		log "port $1 is in use: set PORT_BASE to another value"
		return 1
	fi
}

# wait_port PORT: until something listens on 127.0.0.1:PORT (10 s at most).
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	log "nothing listens on port $1"
	return 1
}

# cpu_ticks PID: user + system clock ticks of a process.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

# json_field NAME < JSON: one number of loadgen's JSON report.
json_field() { sed -n "s/.*\"$1\":\(-\?[0-9.e+-]*\).*/\1/p"; }

# run_one NAME ROUND: start the server, load it, measure it, stop it; appends a row to rows.
run_one() {
	local name=$1 round=$2 data="$WORK/data-$1-$2" pid port judged=""
	mkdir -p "$data"
	for p in $MCP_GRPC $MCP_HTTP $MCP_API $COL_GRPC $COL_INTERNAL; do port_free "$p"; done
	case $name in
	mcpaudit)
		"$WORK/mcpaudit" serve --config "$WORK/mcpaudit.yaml" --data-dir "$data" --grpc-listen "127.0.0.1:$MCP_GRPC" \
			--ingest-listen "127.0.0.1:$MCP_HTTP" --api-listen "127.0.0.1:$MCP_API" --log-level warn \
			>"$data.log" 2>&1 &
		pid=$! port=$MCP_GRPC
		;;
	collector-*)
		PEER_DATA=$data PEER_GRPC_PORT=$COL_GRPC PEER_INTERNAL_PORT=$COL_INTERNAL \
			"$OTELCOL" --config="file:$WORK/otelcol-${name#collector-}.yaml" >"$data.log" 2>&1 &
		pid=$! port=$COL_GRPC
		;;
	esac
	PIDS+=("$pid")
	wait_port "$port"
	local t0
	t0=$(cpu_ticks "$pid")
	"$WORK/mcpaudit" loadgen --protocol otlp-grpc --target "127.0.0.1:$port" --api "" --live=false \
		--duration "$DURATION" --clients "$CLIENTS" --batch "$BATCH" --calls "$CALLS" --seed "$round" \
		--format json >"$data.load.json"
	local t1 t2 hwm
	t1=$(cpu_ticks "$pid")
	if [ "$name" = mcpaudit ]; then
		# Every acknowledged call judged: nothing queued, nothing waiting for a watermark.
		local w0=$SECONDS
		judged=no
		if "$WORK/mcpaudit" status --api-url "http://127.0.0.1:$MCP_API" --wait 180s >"$data.status" 2>&1; then
			judged="$((SECONDS - w0))s"
		fi
	fi
	# The CPU and the peak RSS up to the stop: for mcpaudit they include judging the calls
	# still queued when the load ended (before stop 51 the peak was read at the load's end).
	t2=$(cpu_ticks "$pid")
	hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	local disk acc secs rate cpu cpustop lgcpu written
	disk=$(du -sb "$data" | awk '{print $1}')
	acc=$(json_field accepted <"$data.load.json")
	# What reached the end of the pipeline by the time the server stopped: the calls mcpaudit's
	# store holds, read back from the stopped server's data dir; the Collector's file holds one
	# "spanId" per span.
	if [ "$name" = mcpaudit ]; then
		written=$("$WORK/mcpaudit" calls --data-dir "$data" --format json 2>&1 >/dev/null | awk '/^[0-9]+ calls?$/ {print $1}')
	else
		written=0
		if [ -f "$data/traces.json" ]; then written=$(grep -o '"spanId":"' "$data/traces.json" | wc -l); fi
	fi
	secs=$(json_field seconds <"$data.load.json")
	lgcpu=$(json_field loadgen_cpu_seconds <"$data.load.json")
	rate=$(awk -v a="$acc" -v s="$secs" 'BEGIN {printf "%.0f", a / s}')
	cpu=$(awk -v t=$((t1 - t0)) -v k="$TICK" 'BEGIN {printf "%.1f", t / k}')
	cpustop=$(awk -v t=$((t2 - t0)) -v k="$TICK" 'BEGIN {printf "%.1f", t / k}')
	printf '%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n' "$name" "$round" "$acc" "$secs" "$rate" "$written" "$cpu" \
		"$(awk -v c="$cpu" -v s="$secs" 'BEGIN {printf "%.2f", c / s}')" "$((hwm / 1024))" \
		"$(awk -v d="$disk" 'BEGIN {printf "%.1f", d / 1048576}')" "${judged:--}" "$lgcpu" "$cpustop" >>"$WORK/rows"
	# Errors in the server's log (mcpaudit's JSON lines at ERROR; the Collector's "error" lines),
	# so that a run without KEEP=1 still tells them.
	local errs
	errs=$(grep -c -E '"level":"ERROR"|	error	' "$data.log" || true)
	log "$name round $round: $acc acknowledged in ${secs}s ($rate/s), $written written, $errs error lines in its log ($data.log)"
}

log "mcpaudit with serve.sqlite.calls: $SQLITE_CALLS; load: OTLP/gRPC, $CLIENTS clients x $BATCH spans a request, $DURATION per run, $ROUNDS rounds; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
order=(mcpaudit collector-default collector-durable)
for round in $(seq "$ROUNDS"); do
	for name in "${order[@]}"; do run_one "$name" "$round"; done
	# Alternate: the next round runs them in the reverse order.
	order=("${order[2]}" "${order[1]}" "${order[0]}")
done

echo
echo "Collector $OTELCOL_VERSION and mcpaudit $(git rev-parse --short HEAD 2>/dev/null || echo '?') (serve.sqlite.calls: $SQLITE_CALLS), OTLP/gRPC from mcpaudit loadgen ($CLIENTS clients x $BATCH spans, --live=false), $DURATION a run; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo
printf '| server | round | acknowledged | seconds | acknowledged/s | written | CPU s | cores | CPU µs/call | CPU µs/call to the stop | peak RSS MiB | disk MiB | disk B/call | judged all after | loadgen CPU s |\n'
printf '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n'
awk -F'\t' '{printf "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %s | %s | %.0f | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $7 * 1e6 / $3, $13 * 1e6 / $3, $9, $10, $10 * 1048576 / $3, $11, $12}' "$WORK/rows"
echo
mean() { awk -F'\t' -v n="$1" '$1 == n {s += $5; c++} END {printf "%.0f", c ? s / c : 0}' "$WORK/rows"; }
m=$(mean mcpaudit) d=$(mean collector-default) u=$(mean collector-durable)
echo "mean per second: mcpaudit $m, collector-default $d, collector-durable $u"
awk -v m="$m" -v d="$d" -v u="$u" 'BEGIN {printf "ratio default=%.2f durable=%.2f\n", (d ? m / d : 0), (u ? m / u : 0)}'
