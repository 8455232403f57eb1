# mcpaudit: make help lists the targets.
GO ?= go

.PHONY: help build test test-unit generate bench bench-peer fuzz sample lint image

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/mcpaudit/mcpaudit/internal/version.version=$(VERSION) -X github.com/mcpaudit/mcpaudit/internal/version.revision=$(REVISION)

build: ## build the mcpaudit binary into bin/, stamped with the git version and commit
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/mcpaudit ./cmd/mcpaudit

image: ## build the container image mcpaudit:$(VERSION) (needs docker)
	docker build -t mcpaudit:$(VERSION) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) .

test: ## run every test (installs and starts the real services the tests need)
	./scripts/test.sh

test-unit: ## run the Go tests without installing anything
	$(GO) test ./...

generate: ## regenerate rules, dashboards and the PrometheusRule under deploy/, and docs/config.md
	$(GO) generate ./...

bench: ## run the benchmarks (GOMAXPROCS=1 for the engine figure)
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench . -benchmem ./collector/...

bench-peer: ## mcpaudit serve beside the OpenTelemetry Collector under one OTLP/gRPC load (builds the Collector once; see docs/benchmarks.md)
	./bench/peer/run.sh

fuzz: ## run each fuzz target for 30s
	./scripts/fuzz.sh 30s

sample: build ## analyze the bundled sample capture
	./bin/mcpaudit analyze testdata/sample/mixed.ndjson

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
