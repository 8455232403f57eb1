#!/usr/bin/env bash
# Measures `mcpaudit analyze` on one core against a bare fastjson parse of
# the same lines, taking turns, and its peak RSS (docs/benchmarks.md,
# "Engine"). With --otlp it also analyzes the same exchanges as one OTLP
# JSON document of about 1 GB and checks that it finds what the call
# records find.
#
#   bench/analyze/run.sh [--runs N] [--sessions N] [--span D] [--otlp] [--dir DIR] [--bin MCPAUDIT]
#
# --bin measures another build of mcpaudit (an older commit, to compare).
#
# Needs Go and /usr/bin/time (Debian: apt-get install time).
set -euo pipefail

runs=3
sessions=98000   # about 286k calls, 180 MB of call records
otlp_sessions=330000
span=24h
otlp=false
bin=
dir=${TMPDIR:-/tmp}/mcpaudit-bench-analyze
while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--sessions) sessions=$2; shift 2 ;;
	--span) span=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--otlp) otlp=true; shift ;;
	--otlp-sessions) otlp_sessions=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	*) echo "usage: $0 [--runs N] [--sessions N] [--span D] [--otlp] [--otlp-sessions N] [--dir DIR] [--bin MCPAUDIT]" >&2; exit 2 ;;
	esac
done
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dir"
cd "$root"
# The build measured is a fresh copy, not the linker's output: peak RSS counts
# the binary's mapped pages, and the page-cache folios the linker's writes leave
# (up to 2 MiB, each mapped whole) add up to 20 MiB that a copy's do not
# (docs/benchmarks.md, "Peak RSS and the binary's page cache, anz46").
rm -f "$dir/mcpaudit"
if [ -n "$bin" ]; then
	cp "$bin" "$dir/mcpaudit"
else
	go build -o "$dir/mcpaudit.built" ./cmd/mcpaudit
	cp "$dir/mcpaudit.built" "$dir/mcpaudit"
fi
go build -o "$dir/gen" ./bench/analyze/gen
go build -o "$dir/parse" ./bench/analyze/parse

capture=$dir/capture-$sessions-$span.ndjson
[ -s "$capture" ] || "$dir/gen" -sessions "$sessions" -span "$span" -out "$capture"
echo "capture: $capture, $(stat -c %s "$capture") bytes"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"

# one NAME CMD...: runs CMD with GOMAXPROCS=1, prints "NAME wall user+sys maxrss_kb".
one() {
	local name=$1; shift
	GOMAXPROCS=1 /usr/bin/time -o "$dir/time" -f "%e %U %S %M" "$@" > "$dir/out" 2> "$dir/err" || {
		[ "$name" = analyze ] || { cat "$dir/err" >&2; exit 1; }
	}
	read -r wall user sys rss < "$dir/time"
	echo "$name $wall $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }') $rss"
}

printf '%-8s %8s %8s %10s\n' run wall_s cpu_s rss_MiB
: > "$dir/results"
for i in $(seq "$runs"); do
	one parse "$dir/parse" "$capture" | tee -a "$dir/results" | awk '{printf "%-8s %8s %8s %10.1f\n", $1, $2, $3, $4/1024}'
	one analyze "$dir/mcpaudit" analyze --fail-on never --summary json --format json "$capture" | tee -a "$dir/results" | awk '{printf "%-8s %8s %8s %10.1f\n", $1, $2, $3, $4/1024}'
done
calls=$(grep -o '"calls":[0-9]*' "$dir/err" | head -1 | cut -d: -f2)
cp "$dir/out" "$dir/findings-ndjson.json"
awk -v calls="$calls" '
	$1 == "parse"   { pw += $2; pc += $3; np++ }
	$1 == "analyze" { aw += $2; ac += $3; na++; if ($4 > rss) rss = $4 }
	END {
		printf "calls: %d\n", calls
		printf "analyze: %.0f calls/s wall, %.0f calls/CPU-s (mean of %d)\n", calls * na / aw, calls * na / ac, na
		printf "bare fastjson parse: %.2f s wall, %.2f s CPU (mean of %d)\n", pw / np, pc / np, np
		printf "ratio analyze/parse: %.1fx wall, %.1fx CPU\n", (aw / na) / (pw / np), (ac / na) / (pc / np)
		printf "peak RSS of analyze: %.0f MiB\n", rss / 1024
	}' "$dir/results"

if $otlp; then
	doc=$dir/capture-$otlp_sessions.otlp.json
	rec=$dir/capture-$otlp_sessions.ndjson
	[ -s "$doc" ] || "$dir/gen" -sessions "$otlp_sessions" -format otlp -out "$doc"
	[ -s "$rec" ] || "$dir/gen" -sessions "$otlp_sessions" -out "$rec"
	echo "OTLP document: $doc, $(stat -c %s "$doc") bytes"
	one analyze "$dir/mcpaudit" analyze --fail-on never --summary json --format json "$doc" | awk '{printf "OTLP analyze: %s s wall, %s s CPU, peak RSS %.0f MiB\n", $2, $3, $4/1024}'
	cp "$dir/out" "$dir/findings-otlp.json"
	one analyze "$dir/mcpaudit" analyze --fail-on never --summary json --format json "$rec" > /dev/null
	if cmp -s "$dir/out" "$dir/findings-otlp.json"; then
		echo "OTLP findings: equal to the call records' ($(wc -l < "$dir/out") findings)"
	else
		echo "OTLP findings: DIFFER from the call records' ($(wc -l < "$dir/findings-otlp.json") vs $(wc -l < "$dir/out"))"
		exit 1
	fi
fi
