#!/usr/bin/env bash
# The one test command: installs what the tests need, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

need_apt=()
# Debian's prometheus package has both promtool and the server the end-to-end test starts.
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need_apt+=(prometheus)
# amtool checks deploy/compose/alertmanager.yml (deploy/deploy_test.go).
command -v amtool >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
# Debian's chromium for the page tests (driven by chromedp).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
	else
		echo "test.sh: missing ${need_apt[*]}; install them as root (apt-get install ${need_apt[*]})" >&2
		exit 1
	fi
fi

test -z "$(gofmt -l $(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $(git ls-files '*.go'); exit 1; }
go vet ./...
# ClickHouse for the exporter/clickhouse tests: scripts/clickhouse.sh installs Debian's
# clickhouse-server when missing, starts it on 127.0.0.1 (free ports, a directory of this run's
# own, so that overlapping runs do not stop each other's server) and prints the exports:
# MCPAUDIT_CLICKHOUSE_DSN, and MCPAUDIT_CLICKHOUSE_CTL for the tests that stop and start the
# server. It is stopped and its directory removed when this script exits.
export MCPAUDIT_CLICKHOUSE_DIR="$(mktemp -d /tmp/mcpaudit-clickhouse.XXXXXX)"
eval "$(MCPAUDIT_CLICKHOUSE_TCP_PORT=auto MCPAUDIT_CLICKHOUSE_HTTP_PORT=auto scripts/clickhouse.sh start)"
trap 'scripts/clickhouse.sh stop; rm -rf "$MCPAUDIT_CLICKHOUSE_DIR"' EXIT

# The plain pass's timeout is raised too: under load (the CI of 2026-12-06 14:00 UTC ran beside
# eight other test runs) collector/pipeline and cmd/mcpaudit each passed 10 m.
# go test's vet step is off in both passes: go vet ./... above ran every check it would run.
CI=${CI:-} go test -vet=off -timeout 30m -count=1 -parallel 16 ./... 2>&1 | tee /tmp/mcpaudit-test.log
# The concurrent packages once more under the race detector: the pipeline (engine goroutine,
# receivers, status requests), the receiver and the detector, and the front door's shared state
# (credentials, connection caps, redaction). Measured on 2 shared cores: about 30 s with the race
# build cached, about 4 min when the race build (the SQLite driver above all) starts cold.
# The pipeline's tests took 508 s under the race detector in CI on 2026-12-06 (2 cores), near go
# test's default 10 m timeout: the timeout is raised so that a slower machine does not fail them.
# The pipeline's restart tests whose matrices send calls one at a time run one case of each matrix
# under the race detector (onlyOnceUnderRace in collector/pipeline/racetrim_test.go); every case
# runs in the plain pass above.
go test -race -vet=off -timeout 25m -count=1 ./collector/pipeline/ ./collector/receiver/ ./collector/detect/ \
	./internal/access/ ./internal/connlimit/ ./collector/redact/ 2>&1 | tee -a /tmp/mcpaudit-test.log
# Every parser of outside input, fuzzed for a fixed budget from its kept corpus. The budget is a
# count of inputs, not a duration: Go 1.26's coordinator can fail a duration-bounded run with
# "context deadline exceeded" when a loaded machine starves its workers (go.dev/issue/75804).
scripts/fuzz.sh "${MCPAUDIT_FUZZ_TIME:-50000x}"
