package metrics

import (
	"bufio"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// NewRegistry returns a registry holding the Go runtime and process
// collectors, ready for New.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// WriteFile writes every metric g gathers to path in the Prometheus text
// exposition format. The file is replaced atomically (written to a temporary
// file in the same directory, then renamed).
func WriteFile(path string, g prometheus.Gatherer) error {
	if err := prometheus.WriteToTextfile(path, g); err != nil {
		return fmt.Errorf("cannot write metrics to %s: %w", path, err)
	}
	return nil
}

// WriteText writes every metric g gathers to w in the Prometheus text
// exposition format.
func WriteText(w io.Writer, g prometheus.Gatherer) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("cannot gather metrics: %w", err)
	}
	bw := bufio.NewWriter(w)
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(bw, mf); err != nil {
			return fmt.Errorf("cannot write metrics: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("cannot write metrics: %w", err)
	}
	return nil
}
