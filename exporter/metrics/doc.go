// Package metrics exposes what mcpaudit learns as Prometheus metrics: calls by
// outcome, failures by retry action, writes by state, findings by kind, and the
// health of ingestion.
//
// Metrics implements audit.Sink, so the detector feeds it like any other
// backend. Every label value is bounded: outcomes, states, kinds, severities
// and retry actions are fixed enumerations; tools are the dialect's known tools
// or "other" and are capped per server; error codes pass only when
// Options.KnownCode accepts them, else they become "other"; ingest sources and
// reject reasons are the constants of this package. The server label is the
// configured server name as given: a deployment must have a small, fixed set of
// servers. Documents, idempotency keys, sessions and call ids are never labels;
// they live in findings and the store.
//
// The metric names are exported constants so that the rules and dashboards
// packages use them and a rename fails to compile. docs/metrics.md lists them.
package metrics
