// Package deploy holds no code: its directory is the deployment files of
// mcpaudit (Docker Compose, Kubernetes, systemd, Prometheus, Grafana,
// ClickHouse), and its tests check them without a container engine or a
// cluster: every YAML parses, the Kubernetes manifests decode strictly into
// the Kubernetes and Prometheus Operator API types and agree with each
// other, every referenced file, port and path exists, the PrometheusRule
// holds the rules of prometheus/rules.yaml, and the Prometheus and
// Alertmanager configurations pass promtool and amtool.
// cmd/mcpaudit/deploy_test.go checks each collector configuration with
// mcpaudit's own validation.
package deploy
