package web

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// Status is what the page shows at its top about the collector.
type Status struct {
	// IngestRate is the calls accepted per second over about the last
	// minute; negative when not known.
	IngestRate float64
	// MaxLag is how far the slowest partition's watermark is behind the
	// wall clock (the LAG of mcpaudit status); negative when not known.
	MaxLag time.Duration
	// PartitionsBehind counts the partitions whose lag passes the bound
	// given to WithPartitions (serve: detect.idle_timeout, more than a
	// healthy exporter's flush explains); negative when not known.
	PartitionsBehind int
	// Watermark is the event time up to which every call is judged (the
	// earliest partition's watermark); zero when not known.
	Watermark time.Time
}

// StatusFunc reports the collector's status. It must answer quickly; the
// page shows what it returns as is.
type StatusFunc func(ctx context.Context) Status

// sampleEvery is how often NewMetricsStatus reads the ingest counter.
const sampleEvery = 5 * time.Second

// NewMetricsStatus returns a StatusFunc built from what serve has today:
// the ingest rate from the accepted-records counter of g, sampled every
// five seconds until ctx ends, and the watermark of store. Lag and
// partitions behind are unknown to it: WithPartitions adds them.
func NewMetricsStatus(ctx context.Context, g prometheus.Gatherer, store audit.Store) StatusFunc {
	type sample struct {
		at time.Time
		n  float64
	}
	var mu sync.Mutex
	var samples []sample
	take := func() {
		n, ok := acceptedRecords(g)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		samples = append(samples, sample{now, n})
		for len(samples) > 2 && now.Sub(samples[1].at) >= time.Minute {
			samples = samples[1:]
		}
	}
	take()
	go func() {
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				take()
			}
		}
	}()
	return func(ctx context.Context) Status {
		st := Status{IngestRate: -1, MaxLag: -1, PartitionsBehind: -1}
		mu.Lock()
		if len(samples) >= 2 {
			a, b := samples[0], samples[len(samples)-1]
			if dt := b.at.Sub(a.at).Seconds(); dt > 0 {
				st.IngestRate = (b.n - a.n) / dt
			}
		}
		mu.Unlock()
		if wm, err := store.Watermark(ctx); err == nil {
			st.Watermark = wm
		}
		return st
	}
}

// partsKey keys, in a page view's context, the pipeline's partitions the
// page already asked for (withParts).
type partsKey struct{}

// withParts returns ctx carrying parts, the pipeline's partitions asked
// for by the page view, so that WithPartitions builds the status bar from
// them rather than ask again.
func withParts(ctx context.Context, parts []detect.PartitionStatus) context.Context {
	return context.WithValue(ctx, partsKey{}, parts)
}

// partsFrom returns the partitions ctx carries (withParts), else asks
// parts.
func partsFrom(ctx context.Context, parts func() []detect.PartitionStatus) []detect.PartitionStatus {
	if ps, ok := ctx.Value(partsKey{}).([]detect.PartitionStatus); ok {
		return ps
	}
	return parts()
}

// WithPartitions completes base with the pipeline's partitions (parts, as
// detect.Engine.Status gives them): the largest watermark lag, the
// partitions lagging more than behind, and the earliest watermark. When
// the page has asked the pipeline already for the view (withParts), its
// answer is used and parts is not called: parts must ask the pipeline
// the query API's Status asks.
func WithPartitions(base StatusFunc, parts func() []detect.PartitionStatus, behind time.Duration) StatusFunc {
	return func(ctx context.Context) Status {
		st := base(ctx)
		st.MaxLag, st.PartitionsBehind = 0, 0
		var wm time.Time
		for _, p := range partsFrom(ctx, parts) {
			if p.Watermark.IsZero() {
				continue
			}
			st.MaxLag = max(st.MaxLag, p.Lag)
			if p.Lag > behind {
				st.PartitionsBehind++
			}
			if wm.IsZero() || p.Watermark.Before(wm) {
				wm = p.Watermark
			}
		}
		if !wm.IsZero() {
			st.Watermark = wm
		}
		return st
	}
}

// acceptedRecords sums the accepted records of every source.
func acceptedRecords(g prometheus.Gatherer) (float64, bool) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false
	}
	// No series yet means nothing was accepted yet: zero.
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != metrics.IngestRecordsTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelResult && l.GetValue() == metrics.ResultAccepted {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum, true
}
