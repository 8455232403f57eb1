# mcpaudit: make help lists the targets.
GO ?= go

.PHONY: help build test test-unit generate bench fuzz sample lint

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build the mcpaudit binary into bin/
	$(GO) build -o bin/mcpaudit ./cmd/mcpaudit

test: ## run every test (installs and starts the real services the tests need)
	./scripts/test.sh

test-unit: ## run the Go tests without installing anything
	$(GO) test ./...

generate: ## regenerate rules and dashboards under deploy/
	$(GO) generate ./...

bench: ## run the benchmarks (GOMAXPROCS=1 for the engine figure)
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench . -benchmem ./collector/...

fuzz: ## run each fuzz target for 30s
	./scripts/fuzz.sh 30s

sample: build ## analyze the bundled sample capture
	./bin/mcpaudit analyze testdata/sample/mixed.ndjson

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
