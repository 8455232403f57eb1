package main

import (
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// metricsWriter collects the metrics of one analyze run for --metrics.
type metricsWriter struct {
	reg  *prometheus.Registry
	sink *metrics.Metrics
}

func newMetricsWriter() *metricsWriter {
	reg := prometheus.NewRegistry()
	// A fresh registry cannot already hold these metrics.
	m, _ := metrics.New(reg, metrics.Options{KnownCode: classify.KnownCode})
	return &metricsWriter{reg: reg, sink: m}
}

func (w *metricsWriter) writeFile(path string) error { return metrics.WriteFile(path, w.reg) }
