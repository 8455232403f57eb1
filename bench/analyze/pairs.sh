#!/usr/bin/env bash
# Compares two builds of mcpaudit on `analyze` with one core, the way
# docs/benchmarks.md ("Engine") measures a change on a shared machine: the
# two builds take turns, the order flips every pair, and each run's load
# average is printed beside it. It checks that both builds print the same
# findings and summary (cmp of stdout and stderr) in every run, and ends
# with the medians and the per-pair ratios of CPU time (user+sys).
#
#   bench/analyze/pairs.sh [--pairs N] [--sessions N] [--span D] [--dir DIR] [--input FILE] BEFORE AFTER
#
# BEFORE and AFTER are mcpaudit binaries (before: `go build -o B
# ./cmd/mcpaudit` in a checkout of the base commit). The input is the
# capture of run.sh (98,000 sessions over 24 h, about 286k calls, 180 MB),
# generated on first use, or --input FILE.
#
# Needs Go and /usr/bin/time (Debian: apt-get install time).
set -euo pipefail

pairs=8
sessions=98000
span=24h
dir=${TMPDIR:-/tmp}/mcpaudit-bench-analyze
input=
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) pairs=$2; shift 2 ;;
	--sessions) sessions=$2; shift 2 ;;
	--span) span=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--input) input=$2; shift 2 ;;
	-*) echo "usage: $0 [--pairs N] [--sessions N] [--span D] [--dir DIR] [--input FILE] BEFORE AFTER" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -eq 2 ] || { echo "usage: $0 [--pairs N] [--sessions N] [--span D] [--dir DIR] [--input FILE] BEFORE AFTER" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
before=$(realpath "$1")
after=$(realpath "$2")

root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$dir"
if [ -z "$input" ]; then
	input=$dir/capture-$sessions-$span.ndjson
	if [ ! -s "$input" ]; then
		(cd "$root" && go build -o "$dir/gen" ./bench/analyze/gen)
		"$dir/gen" -sessions "$sessions" -span "$span" -out "$input"
	fi
fi
# Both builds run from fresh copies made the same way. Peak RSS counts the
# binary's pages that are mapped, and the kernel maps a page-cache folio whole:
# a binary as the Go linker wrote it may sit in 2 MiB folios, a copy in 64 KiB
# ones, which moved analyze's peak RSS by 16-20 MiB with the same heap
# (docs/benchmarks.md, "Peak RSS and the binary's page cache, anz46").
rm -f "$dir/before.bin" "$dir/after.bin"
cp "$before" "$dir/before.bin"
cp "$after" "$dir/after.bin"
before=$dir/before.bin
after=$dir/after.bin
echo "input: $input, $(stat -c %s "$input") bytes"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); start $(date -u '+%Y-%m-%d %H:%M:%S') UTC"

# one NAME BIN: runs BIN's analyze with GOMAXPROCS=1 and prints
# "NAME load1 wall cpu maxrss_kb"; its output is left in $dir/NAME.out/.err.
one() {
	local name=$1 bin=$2 load
	load=$(cut -d' ' -f1 /proc/loadavg)
	GOMAXPROCS=1 /usr/bin/time -o "$dir/time" -f "%e %U %S %M" "$bin" analyze --fail-on never --summary json --format json "$input" > "$dir/$name.out" 2> "$dir/$name.err" || true
	read -r wall user sys rss < "$dir/time"
	echo "$name $load $wall $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }') $rss"
}

: > "$dir/pairs"
printf '%-4s %-6s %6s %7s %7s %8s\n' pair build load1 wall_s cpu_s rss_MiB
for i in $(seq "$pairs"); do
	order="before after"
	[ $((i % 2)) -eq 0 ] && order="after before"
	for b in $order; do
		bin=$before
		[ "$b" = after ] && bin=$after
		one "$b" "$bin" | tee -a "$dir/pairs" | awk -v i="$i" '{ printf "%-4s %-6s %6s %7s %7s %8.1f\n", i, $1, $2, $3, $4, $5 / 1024 }'
	done
	if ! cmp -s "$dir/before.out" "$dir/after.out" || ! cmp -s "$dir/before.err" "$dir/after.err"; then
		echo "pair $i: the builds' findings or summaries DIFFER ($dir/before.out .err, $dir/after.out .err)" >&2
		exit 1
	fi
done
calls=$(grep -o '"calls":[0-9]*' "$dir/after.err" | head -1 | cut -d: -f2)
echo "findings and summary: identical in all $pairs pairs ($(wc -l < "$dir/after.out") findings, $calls calls); end $(date -u '+%H:%M:%S') UTC"
awk -v calls="$calls" '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	$1 == "before" { b[++nb] = $4; bl[nb] = $4; lo = (lo == "" || $2 < lo) ? $2 : lo; hi = ($2 > hi) ? $2 : hi }
	$1 == "after"  { a[++na] = $4; al[na] = $4; lo = (lo == "" || $2 < lo) ? $2 : lo; hi = ($2 > hi) ? $2 : hi }
	END {
		less = 0
		for (i = 1; i <= na; i++) { r[i] = al[i] / bl[i]; if (al[i] < bl[i]) less++ }
		bmin = bmax = b[1]; amin = amax = a[1]
		for (i = 1; i <= nb; i++) { if (b[i] < bmin) bmin = b[i]; if (b[i] > bmax) bmax = b[i] }
		for (i = 1; i <= na; i++) { if (a[i] < amin) amin = a[i]; if (a[i] > amax) amax = a[i] }
		mb = median(b, nb); ma = median(a, na); mr = median(r, na)
		printf "load average (1 min) over the runs: %s-%s\n", lo, hi
		printf "CPU (user+sys), median (range): before %.2f s (%.2f-%.2f), after %.2f s (%.2f-%.2f)\n", mb, bmin, bmax, ma, amin, amax
		printf "calls per CPU second at the median: before %.0f, after %.0f\n", calls / mb, calls / ma
		printf "after/before per pair: median %.3f; after less in %d pairs of %d\n", mr, less, na
	}' "$dir/pairs"
