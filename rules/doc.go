// Package rules holds mcpaudit's Prometheus recording and alerting rules as
// Go: the write-durability SLI at several windows, multi-window multi-burn-rate
// SLO alerts (Google SRE workbook, chapter 5), immediate alerts on findings
// that need a person now, and alerts on client retry behaviour, uncertain
// outcomes, ingestion and the collector itself.
//
// Every expression is built from the metric name constants of
// exporter/metrics. `go generate ./rules` writes deploy/prometheus/rules.yaml,
// `mcpaudit rules` prints the same file for other options, and the tests run
// it through promtool and a real Prometheus. docs/runbooks.md has one section
// per alert.
package rules

//go:generate go run ./gen -o ../deploy/prometheus/rules.yaml -prometheusrule ../deploy/kubernetes/prometheusrule.yaml
