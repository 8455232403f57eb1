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
	// minute, over every tenant; negative when not known, and to a view
	// of one tenant.
	IngestRate float64
	// MaxLag is how far the slowest partition with something waiting
	// (calls for its watermark, or judged writes pending) has its
	// watermark behind the wall clock (the LAG of mcpaudit status); zero
	// when nothing waits, negative when not known. A quiet partition's
	// lag is QuietLag: it holds nothing back.
	MaxLag time.Duration
	// PartitionsBehind counts the partitions behind
	// (detect.PartitionStatus.FallenBehind: calls waiting with the watermark more
	// than detect.idle_timeout behind, or writes pending with it more than
	// detect.allowed_lateness behind); negative when not known.
	PartitionsBehind int
	// QuietLag is the largest lag of a partition with nothing waiting,
	// when it is more than the bound given to WithPartitions (serve:
	// detect.idle_timeout): how late that partition's last delivery came,
	// not a backlog; QuietServer names it. Zero otherwise.
	QuietLag    time.Duration
	QuietServer string
	// Watermark is the event time up to which every call is judged (the
	// earliest partition's watermark); zero when not known.
	Watermark time.Time
	// WatermarkServer names the partition whose watermark Watermark is
	// (tenant/server, or server), when the partitions are known: a quiet
	// server whose last calls are old holds the earliest watermark far
	// back while every other is on time (nop48). Empty otherwise (the
	// store's watermark).
	WatermarkServer string
}

// StatusFunc reports the collector's status. It must answer quickly; the
// page shows what it returns as is, so it must keep to the view's tenant
// that ctx carries (withScope), as NewMetricsStatus and WithPartitions do.
type StatusFunc func(ctx context.Context) Status

// sampleEvery is how often NewMetricsStatus reads the ingest counter.
const sampleEvery = 5 * time.Second

// NewMetricsStatus returns a StatusFunc built from what serve has today:
// the ingest rate from the accepted-records counter of g, sampled every
// five seconds until ctx ends, and the watermark of store. Lag and
// partitions behind are unknown to it: WithPartitions adds them. The
// counter and the store's watermark count every tenant: to a view of one
// tenant (withScope) it shows neither.
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
		if scopeOf(ctx).tenant != "" {
			return st
		}
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

// scopeKey keys, in a page view's context, what the view may show of the
// pipeline (withScope).
type scopeKey struct{}

// scope is a page view's share of the pipeline: the caller's tenant
// (empty: every tenant, for the admin "*" credential and with
// authentication off) and, when the page asked the pipeline already
// (asked), its partitions.
type scope struct {
	tenant string
	asked  bool
	parts  []detect.PartitionStatus
}

// withScope returns ctx carrying the caller's tenant and, when asked,
// parts, the pipeline's partitions asked for by the page view, so that
// the StatusFuncs show the tenant's figures only and WithPartitions builds
// the status bar from parts rather than ask again.
func withScope(ctx context.Context, tenant string, asked bool, parts []detect.PartitionStatus) context.Context {
	return context.WithValue(ctx, scopeKey{}, scope{tenant: tenant, asked: asked, parts: parts})
}

// scopeOf returns the scope ctx carries; without one, every tenant.
func scopeOf(ctx context.Context) scope {
	sc, _ := ctx.Value(scopeKey{}).(scope)
	return sc
}

// WithPartitions completes base with the pipeline's partitions (parts, as
// detect.Engine.Status gives them) of the view's tenant (withScope): the
// largest watermark lag of the partitions where something waits, the
// partitions behind, the largest lag above quiet of a partition where
// nothing waits (its last delivery's), and the earliest watermark. When the page has asked the pipeline already for
// the view, its answer is used and parts is not called: parts must ask
// the pipeline the query API's Status asks.
func WithPartitions(base StatusFunc, parts func() []detect.PartitionStatus, quiet time.Duration) StatusFunc {
	return func(ctx context.Context) Status {
		st := base(ctx)
		st.MaxLag, st.PartitionsBehind = 0, 0
		sc := scopeOf(ctx)
		ps := sc.parts
		if !sc.asked {
			ps = parts()
		}
		var wm time.Time
		var wmServer string
		for _, p := range ps {
			if p.Watermark.IsZero() || sc.tenant != "" && p.Tenant != sc.tenant {
				continue
			}
			if p.FallenBehind {
				st.PartitionsBehind++
			}
			switch {
			case p.Buffered > 0 || p.Pending > 0:
				st.MaxLag = max(st.MaxLag, p.Lag)
			case p.Lag > quiet && p.Lag > st.QuietLag:
				st.QuietLag, st.QuietServer = p.Lag, partitionName(p)
			}
			if wm.IsZero() || p.Watermark.Before(wm) {
				wm, wmServer = p.Watermark, partitionName(p)
			}
		}
		if !wm.IsZero() {
			st.Watermark, st.WatermarkServer = wm, wmServer
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

// partitionName names the partition p as the status bar does: its server,
// after its tenant when it has one (api's status lines name it so too).
func partitionName(p detect.PartitionStatus) string {
	if p.Tenant != "" {
		return p.Tenant + "/" + p.Server
	}
	return p.Server
}
