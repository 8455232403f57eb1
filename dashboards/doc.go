// Package dashboards holds mcpaudit's Grafana dashboards as Go, built with
// the Grafana Foundation SDK: MCP write traffic, the write-durability SLO,
// failures by retry action, findings, and collector health.
//
// Every query is built from the metric name constants of exporter/metrics,
// so a renamed metric fails to compile here. `go generate ./dashboards`
// writes deploy/grafana/dashboards/<uid>.json; the tests check that those
// files are current, that they read back through the SDK, that every query
// parses as PromQL and reads only metrics the exporter defines, and (with a
// real Prometheus) that the queries run.
package dashboards

//go:generate go run ./gen -o ../deploy/grafana/dashboards
