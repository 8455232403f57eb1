#!/usr/bin/env bash
# Runs every fuzz target (one for each parser of outside input) for the given
# budget each, a time (default 30s) or a count of inputs (20000x); `make test`
# runs 50000 inputs each.
#
# Corpora: the seeds of each target are committed under its package's
# testdata/fuzz/<Target>/ and run by every `go test`; what a run finds
# interesting is kept in Go's fuzz cache ($(go env GOCACHE)/fuzz), which the
# next run starts from. MCPAUDIT_FUZZ_KEEP=1 also copies it into
# testdata/fuzz/<Target>/, to be committed with the change that made it
# interesting. A failing input is written to testdata/fuzz/<Target>/ by Go
# itself and fails this script.
#
# MCPAUDIT_FUZZ_MINIMIZE is go test's -fuzzminimizetime (default 60s, Go's
# own). With a count budget, Go gives each input that widens coverage up to
# half the budget (or 60 s) of one worker to be made smaller, and most of the
# 50,000 inputs go there: the 8 targets of canon, capture and dialect found
# 2-96 new inputs each; with 0s, 147-680 each, but in 45 % more time in all
# (docs/benchmarks.md, ci47).
# go test's vet step is off: go vet ./... (make lint, scripts/test.sh) runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-30s}
minimize=${MCPAUDIT_FUZZ_MINIMIZE:-60s}
targets=(
	collector/canon:FuzzParseError
	collector/canon:FuzzBadNumber
	collector/capture:FuzzRecordParser
	collector/capture:FuzzDecoder
	collector/capture:FuzzOTLPJSON
	collector/dialect:FuzzExtractCalls
	collector/dialect:FuzzAppendCalls
	collector/dialect:FuzzOddlynewRun
	collector/receiver:FuzzCalls
	collector/receiver:FuzzTraces
	collector/receiver:FuzzSalvage
	collector/otlp:FuzzReadProto
	collector/redact:FuzzJSON
	collector/tap:FuzzSSE
	collector/tap:FuzzParse
	internal/access:FuzzParseTokens
	api:FuzzParseWindow
)
cache=$(go env GOCACHE)/fuzz/$(go list -m)
# Each package's instrumented test binary is built once (go test -c -fuzz)
# and run for each of its targets in turn, with the flags go test -fuzz
# gives it: the same instrumentation, corpus, fuzz cache and default
# 10-minute timeout. go test -fuzz itself links the binary again for every
# target (its link is not cached); 8 of the 17 targets share a package.
bin=$(mktemp -d "${TMPDIR:-/tmp}/mcpaudit-fuzz.XXXXXX")
trap 'rm -rf "$bin"' EXIT
built=
for target in "${targets[@]}"; do
	pkg=${target%%:*}; fn=${target#*:}
	if [ "$pkg" != "$built" ]; then
		echo "== $pkg (build)"
		go test -vet=off -c -fuzz . -o "$bin/fuzz.test" "./$pkg"
		built=$pkg
	fi
	echo "== $pkg $fn"
	(cd "$pkg" && "$bin/fuzz.test" -test.run '^$' -test.fuzz "^$fn\$" -test.fuzztime "$t" \
		-test.fuzzminimizetime "$minimize" -test.fuzzcachedir "$cache/$pkg" -test.paniconexit0 -test.timeout 10m0s)
	if [ -n "${MCPAUDIT_FUZZ_KEEP:-}" ] && [ -d "$cache/$pkg/$fn" ]; then
		mkdir -p "$pkg/testdata/fuzz/$fn"
		cp -n "$cache/$pkg/$fn"/* "$pkg/testdata/fuzz/$fn/" 2>/dev/null || true
	fi
done
