# syntax=docker/dockerfile:1
# mcpaudit collector image: a static binary on a distroless base, run as a
# non-root user. Build from the repository root:
#
#   docker build -t mcpaudit:dev \
#     --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) .
#
# The build context has no .git (see .dockerignore), so the version and
# commit come from the build arguments through -ldflags -X
# (internal/version); `mcpaudit version` and mcpaudit_build_info show them.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG REVISION=unknown
RUN CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags "-s -w -X github.com/mcpaudit/mcpaudit/internal/version.version=${VERSION} -X github.com/mcpaudit/mcpaudit/internal/version.revision=${REVISION}" \
      -o /out/mcpaudit ./cmd/mcpaudit \
 && /out/mcpaudit version \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="mcpaudit" \
      org.opencontainers.image.description="Audit of MCP write traffic: OTLP and call-record ingest, failure classification by retry action, findings, Prometheus metrics and a query API." \
      org.opencontainers.image.source="https://github.com/mcpaudit/mcpaudit" \
      org.opencontainers.image.documentation="https://github.com/mcpaudit/mcpaudit/blob/main/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="mcpaudit" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
COPY --from=build /out/mcpaudit /usr/local/bin/mcpaudit
# The embedded store's data directory, owned by the nonroot user (65532).
COPY --from=build --chown=65532:65532 /out/data /var/lib/mcpaudit
USER 65532:65532
WORKDIR /var/lib/mcpaudit
VOLUME ["/var/lib/mcpaudit"]
# 4317 OTLP/gRPC, 4318 OTLP/HTTP and call records, 9464 query API, /metrics, /healthz, /readyz.
EXPOSE 4317 4318 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/mcpaudit", "healthcheck", "--url", "http://127.0.0.1:9464/healthz"]
ENTRYPOINT ["/usr/local/bin/mcpaudit"]
CMD ["serve", "--data-dir", "/var/lib/mcpaudit"]
