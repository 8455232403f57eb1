package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
)

// downtimes exports the downtimes serve read from its state file at
// start. They do not change while the process runs: its own end is told
// by the next one.
type downtimes struct {
	last, restart *prometheus.Desc
	kept          []audit.Downtime
	// lastKnown: the newest of kept is the one before this start.
	lastKnown bool
}

// WatchDowntimes has reg export the downtimes serve keeps: kept, oldest
// first (pipeline.Pipeline.Downtimes), of which the newest is the one
// before this start when lastKnown (it is not when the start could not
// tell how long serve was down: pipeline.Pipeline.LastDowntime is zero).
// ServeLastDowntimeSeconds has a series only then;
// ServeRestartTimestampSeconds one for each LabelEnd among kept. A value
// of End outside Ends counts as audit.EndUnknown.
func WatchDowntimes(reg prometheus.Registerer, kept []audit.Downtime, lastKnown bool) error {
	desc := func(name string) *prometheus.Desc {
		f := family(name)
		return prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return reg.Register(&downtimes{last: desc(ServeLastDowntimeSeconds), restart: desc(ServeRestartTimestampSeconds),
		kept: slices.Clone(kept), lastKnown: lastKnown && len(kept) > 0})
}

func (d *downtimes) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.last
	ch <- d.restart
}

func (d *downtimes) Collect(ch chan<- prometheus.Metric) {
	if d.lastKnown {
		l := d.kept[len(d.kept)-1]
		ch <- prometheus.MustNewConstMetric(d.last, prometheus.GaugeValue, l.To.Sub(l.From).Seconds(), endLabel(l.End))
	}
	latest := map[string]float64{}
	for _, k := range d.kept {
		// Kept oldest first, but a clock stepped back between two starts
		// must not make an older start the latest.
		e, t := endLabel(k.End), float64(k.To.UnixNano())/1e9
		if v, ok := latest[e]; !ok || t > v {
			latest[e] = t
		}
	}
	for _, e := range Ends {
		if t, ok := latest[e]; ok {
			ch <- prometheus.MustNewConstMetric(d.restart, prometheus.GaugeValue, t, e)
		}
	}
}

// endLabel bounds how a run ended to Ends.
func endLabel(end string) string {
	if slices.Contains(Ends, end) {
		return end
	}
	return audit.EndUnknown
}
