#!/usr/bin/env bash
# Runs every fuzz target for the given time each (default 30s).
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-30s}
for target in capture:FuzzRecordParser capture:FuzzDecoder capture:FuzzOTLPJSON dialect:FuzzExtractCalls dialect:FuzzAppendCalls dialect:FuzzOddlynewRun; do
	pkg=${target%%:*}; fn=${target#*:}
	echo "== $pkg $fn"
	go test "./collector/$pkg" -run '^$' -fuzz "^$fn\$" -fuzztime "$t"
done
