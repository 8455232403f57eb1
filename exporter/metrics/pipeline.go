package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// PartitionView is what the pipeline metrics need of one partition's
// status (collector/detect.PartitionStatus).
type PartitionView struct {
	Server               string
	LagSeconds           float64
	Buffered             int
	Late, TooLate, Ahead int64
	// IDCollisions counts the partition's calls dropped for a different
	// call under their span ids, or another response under their call id
	// (PipelineIDCollisionsTotal).
	IDCollisions int64
	// OverflowCalls counts the calls taken under the partition's overflow
	// source (PipelineSourceOverflowCallsTotal); SourcesDisplaced the quiet
	// sources forgotten to make room (PipelineSourcesDisplacedTotal).
	OverflowCalls, SourcesDisplaced int64
	Sources                         []SourceView
	hasWatermark                    bool
}

// SourceView is what the pipeline metrics need of one source feeding a
// partition.
type SourceView struct {
	Name       string
	LagSeconds float64
	Idle       bool
}

// NewPartitionView returns the view of a partition; hasWatermark is false
// while nothing of it was judged (its lag is then not reported).
func NewPartitionView(server string, lag float64, hasWatermark bool, buffered int, late, tooLate, ahead int64, sources []SourceView) PartitionView {
	return PartitionView{Server: server, LagSeconds: lag, hasWatermark: hasWatermark, Buffered: buffered,
		Late: late, TooLate: tooLate, Ahead: ahead, Sources: sources}
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
}

// WatchPipeline has the registry of m export the pipeline's status, read
// from status at each scrape.
func (m *Metrics) WatchPipeline(reg prometheus.Registerer, status func() []PartitionView) error {
	c := &pipelineCollector{m: m, status: status, descs: map[string]*prometheus.Desc{}}
	for _, name := range []string{PipelineWatermarkLagSeconds, PipelineSourceLagSeconds, PipelineSources,
		PipelineBufferedCalls, PipelineLateCallsTotal, PipelineClockAheadCallsTotal, PipelineIDCollisionsTotal,
		PipelineSourceOverflowCallsTotal, PipelineSourcesDisplacedTotal} {
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
		lag                  float64
		hasLag               bool
		sourceLag            map[string]float64 // by state
		late, tooLate, ahead int64
		collisions           int64
		overflow, displaced  int64
	}
	servers := map[string]*server{}
	seen := map[string]bool{}
	active, idle, buffered := 0, 0, 0
	for _, p := range c.status() {
		// Partitions of servers without a label of their own (past the
		// cap) are summed up under "other".
		label := c.m.ServerLabel(p.Server)
		s := servers[label]
		if s == nil {
			s = &server{sourceLag: map[string]float64{}}
			servers[label] = s
		}
		if p.hasWatermark && (!s.hasLag || p.LagSeconds > s.lag) {
			s.lag, s.hasLag = p.LagSeconds, true
		}
		s.late += p.Late
		s.tooLate += p.TooLate
		s.ahead += p.Ahead
		s.collisions += p.IDCollisions
		s.overflow += p.OverflowCalls
		s.displaced += p.SourcesDisplaced
		buffered += p.Buffered
		for _, src := range p.Sources {
			state := SourceActive
			if src.Idle {
				state = SourceIdle
			}
			if lag, ok := s.sourceLag[state]; !ok || src.LagSeconds > lag {
				s.sourceLag[state] = src.LagSeconds
			}
			if seen[src.Name] {
				continue
			}
			seen[src.Name] = true
			if src.Idle {
				idle++
			} else {
				active++
			}
		}
	}
	for name, s := range servers {
		if s.hasLag {
			ch <- prometheus.MustNewConstMetric(c.descs[PipelineWatermarkLagSeconds], prometheus.GaugeValue, s.lag, name)
		}
		for state, lag := range s.sourceLag {
			ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourceLagSeconds], prometheus.GaugeValue, lag, name, state)
		}
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineLateCallsTotal], prometheus.CounterValue, float64(s.late), name, LateJudged)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineLateCallsTotal], prometheus.CounterValue, float64(s.tooLate), name, LateTooLate)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineClockAheadCallsTotal], prometheus.CounterValue, float64(s.ahead), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineIDCollisionsTotal], prometheus.CounterValue, float64(s.collisions), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourceOverflowCallsTotal], prometheus.CounterValue, float64(s.overflow), name)
		ch <- prometheus.MustNewConstMetric(c.descs[PipelineSourcesDisplacedTotal], prometheus.CounterValue, float64(s.displaced), name)
	}
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineSources], prometheus.GaugeValue, float64(active), SourceActive)
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineSources], prometheus.GaugeValue, float64(idle), SourceIdle)
	ch <- prometheus.MustNewConstMetric(c.descs[PipelineBufferedCalls], prometheus.GaugeValue, float64(buffered))
}
