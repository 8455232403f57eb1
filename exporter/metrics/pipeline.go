package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// PartitionView is what the pipeline metrics need of one partition's
// status (collector/detect.PartitionStatus).
type PartitionView struct {
	// Tenant and Server name the partition: its counts are its own since
	// it began, and a partition freed (idle, nothing to correlate) or
	// begun anew has its counts carried (pipelineCollector.carried). Gen
	// tells a partition begun anew from the one before it under its key
	// (detect.PartitionStatus.Gen).
	Tenant, Server string
	Gen            uint64
	LagSeconds     float64
	Buffered       int
	partitionCounts
	Sources      []SourceView
	hasWatermark bool
}

// partitionCounts are a partition's counters, which only grow while it
// lives.
type partitionCounts struct {
	Late, TooLate, Ahead int64
	// Behind counts the calls of TooLate whose source's clock was behind
	// by more than detect.max_clock_lag (PipelineClockBehindCallsTotal).
	Behind int64
	// IDCollisions counts the partition's calls dropped for a different
	// call under their span ids, or another response under their call id
	// (PipelineIDCollisionsTotal).
	IDCollisions int64
	// OverflowCalls counts the calls taken under the partition's overflow
	// source (PipelineSourceOverflowCallsTotal); SourcesDisplaced the quiet
	// sources forgotten to make room (PipelineSourcesDisplacedTotal).
	OverflowCalls, SourcesDisplaced int64
}

func (c *partitionCounts) add(o partitionCounts) {
	c.Late += o.Late
	c.TooLate += o.TooLate
	c.Ahead += o.Ahead
	c.Behind += o.Behind
	c.IDCollisions += o.IDCollisions
	c.OverflowCalls += o.OverflowCalls
	c.SourcesDisplaced += o.SourcesDisplaced
}

// below reports whether any of c is below o's: c is not o's partition's,
// grown, but a new partition's under its key.
func (c partitionCounts) below(o partitionCounts) bool {
	return c.Late < o.Late || c.TooLate < o.TooLate || c.Ahead < o.Ahead || c.Behind < o.Behind || c.IDCollisions < o.IDCollisions ||
		c.OverflowCalls < o.OverflowCalls || c.SourcesDisplaced < o.SourcesDisplaced
}

// countedPartition is a partition's counts at a scrape, with its Gen and
// the server label they were summed under.
type countedPartition struct {
	gen   uint64
	label string
	partitionCounts
}

// SourceView is what the pipeline metrics need of one source feeding a
// partition.
type SourceView struct {
	Name       string
	LagSeconds float64
	Idle       bool
	// HoldLagSeconds is, for an idle source that still holds its
	// partition at the lag it showed while it delivered (a slow clock,
	// detect.SourceStatus.HoldLag), that lag; 0 otherwise. Such a source
	// is exported as active at that lag: it holds its partition back as
	// an active one does, and its lag is what the partition waits for.
	// Before sg22 it went to the idle series whenever it was quiet
	// between batches, and the active series fell to the on-time
	// sources' lag (live22's S1: McpAuditSourceLagging never fired for a
	// source holding its server 10 minutes behind).
	HoldLagSeconds float64
}

// holds reports whether the source holds its partition back, and at what
// lag: an active one at its lag, an idle one at the lag it holds at.
func (v SourceView) holds() (float64, bool) {
	switch {
	case !v.Idle:
		return v.LagSeconds, true
	case v.HoldLagSeconds > 0:
		return v.HoldLagSeconds, true
	}
	return v.LagSeconds, false
}

// NewPartitionView returns the view of a partition; hasWatermark is false
// while nothing of it was judged (its lag is then not reported).
func NewPartitionView(server string, lag float64, hasWatermark bool, buffered int, late, tooLate, ahead int64, sources []SourceView) PartitionView {
	return PartitionView{Server: server, LagSeconds: lag, hasWatermark: hasWatermark, Buffered: buffered,
		partitionCounts: partitionCounts{Late: late, TooLate: tooLate, Ahead: ahead}, Sources: sources}
}

// pipelineCollector exports the pipeline's event-time status at each
// scrape. Series are per server (bounded like the other server labels);
// sources, which are unbounded (instances, posters), are only counted and
// their largest lag kept.
type pipelineCollector struct {
	mu     sync.Mutex
	m      *Metrics
	status func() []PartitionView
	descs  map[string]*prometheus.Desc
	// counted is, by partition (tenant and server), its counts at the
	// last scrape, with its Gen and the server label they were summed
	// under (its server's for good: serverLabelFor); carried, by server
	// label, the counts of the partitions gone since the start (freed
	// when idle with nothing to correlate, or begun anew under their
	// key), so that no label's counters go down, which Prometheus would
	// read as a reset. A partition is freed only after its sources were quiet for a
	// minute or more, its counts unchanged, so a scrape in that time saw
	// them whole unless scrapes are further apart. Bounded by the
	// partitions held and the server labels.
	counted map[[2]string]countedPartition
	carried map[string]*partitionCounts
}

// WatchPipeline has the registry of m export the pipeline's status, read
// from status at each scrape.
func (m *Metrics) WatchPipeline(reg prometheus.Registerer, status func() []PartitionView) error {
	c := &pipelineCollector{m: m, status: status, descs: map[string]*prometheus.Desc{},
		counted: map[[2]string]countedPartition{}, carried: map[string]*partitionCounts{}}
	for _, name := range []string{PipelineWatermarkLagSeconds, PipelineSourceLagSeconds, PipelineSources,
		PipelineBufferedCalls, PipelineLateCallsTotal, PipelineClockAheadCallsTotal, PipelineClockBehindCallsTotal,
		PipelineIDCollisionsTotal, PipelineSourceOverflowCallsTotal, PipelineSourcesDisplacedTotal} {
		f := family(name)
		c.descs[name] = prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return reg.Register(c)
}

func (c *pipelineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *pipelineCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type server struct {
		lag       float64
		hasLag    bool
		sourceLag map[string]float64 // by state
		// counts: the server has counters to export (its partitions'
		// counts, or counts carried).
		counts bool
		partitionCounts
	}
	servers := map[string]*server{}
	serverOf := func(label string) *server {
		s := servers[label]
		if s == nil {
			s = &server{sourceLag: map[string]float64{}}
			servers[label] = s
		}
		return s
	}
	carry := func(label string, pc partitionCounts) {
		if c.carried[label] == nil {
			c.carried[label] = &partitionCounts{}
		}
		c.carried[label].add(pc)
	}
	seen := map[string]bool{} // source name -> holds a partition
	counted := make(map[[2]string]countedPartition, len(c.counted))
	active, idle, buffered := 0, 0, 0
	for _, p := range c.status() {
		// Partitions of servers without a label of their own (past the
		// cap) are summed up under "other".
		label, final := c.m.serverLabelFor(p.Server, p.partitionCounts != partitionCounts{})
		s := serverOf(label)
		if p.hasWatermark && (!s.hasLag || p.LagSeconds > s.lag) {
			s.lag, s.hasLag = p.LagSeconds, true
		}
		// A partition whose server has no label yet (its first call not
		// counted: a new partition waits detect.join_wait before judging)
		// is given one once it has counts (its calls too late, or dropped
		// as collisions, may never be judged), not counted under "other"
		// until then: its counts would go from "other" to its own label,
		// and "other" down. So are its sources' lags: under "other" they
		// were a series of no server past the cap, gone once the server
		// had its label, and McpAuditSourceLagging would name "other".
		if final {
			s.counts = true
			s.add(p.partitionCounts)
			counted[[2]string{p.Tenant, p.Server}] = countedPartition{gen: p.Gen, label: label, partitionCounts: p.partitionCounts}
		}
		buffered += p.Buffered
		for _, src := range p.Sources {
			state := SourceActive
			lag, holds := src.holds()
			if !holds {
				state = SourceIdle
			}
			if was, ok := s.sourceLag[state]; final && (!ok || lag > was) {
				s.sourceLag[state] = lag
			}
			// A source is counted once, active if it holds any of the
			// partitions it feeds.
			seen[src.Name] = seen[src.Name] || holds
		}
	}
	for _, holds := range seen {
		if holds {
			active++
		} else {
			idle++
		}
	}
	for k, was := range c.counted {
		if now, ok := counted[k]; !ok || now.gen != was.gen || now.below(was.partitionCounts) {
			carry(was.label, was.partitionCounts)
		}
	}
	c.counted = counted
	for label, pc := range c.carried {
		s := serverOf(label)
		s.counts = true
		s.add(*pc)
	}
	for name, s := range servers {
		if s.hasLag {
			ch <- prometheus.MustNewConstMetric(c.descs[PipelineWatermarkLagSeconds], prometheus.GaugeValue, s.lag, name)
		}
		for state, lag := range s.sourceLag {
			ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourceLagSeconds], prometheus.GaugeValue, lag, name, state)
		}
		if !s.counts {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineLateCallsTotal], prometheus.CounterValue, float64(s.Late), name, LateJudged)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineLateCallsTotal], prometheus.CounterValue, float64(s.TooLate), name, LateTooLate)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineClockAheadCallsTotal], prometheus.CounterValue, float64(s.Ahead), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineClockBehindCallsTotal], prometheus.CounterValue, float64(s.Behind), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineIDCollisionsTotal], prometheus.CounterValue, float64(s.IDCollisions), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourceOverflowCallsTotal], prometheus.CounterValue, float64(s.OverflowCalls), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourcesDisplacedTotal], prometheus.CounterValue, float64(s.SourcesDisplaced), name)
	}
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineSources], prometheus.GaugeValue, float64(active), SourceActive)
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineSources], prometheus.GaugeValue, float64(idle), SourceIdle)
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineBufferedCalls], prometheus.GaugeValue, float64(buffered))
}
