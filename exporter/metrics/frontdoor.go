package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// ListenerView is what the metrics need of one listener.
type ListenerView struct {
	// Name is ListenerIngest, ListenerGRPC or ListenerAPI.
	Name          string
	Open, Refused int64
}

// frontDoor exports the listeners' connections and the ingest bytes in
// flight at each scrape.
type frontDoor struct {
	listeners func() []ListenerView
	inFlight  func() int64
	open      *prometheus.Desc
	refused   *prometheus.Desc
	bytes     *prometheus.Desc
}

// WatchFrontDoor has reg export the connections of the listeners and the
// ingest bytes in flight, read at each scrape.
func WatchFrontDoor(reg prometheus.Registerer, listeners func() []ListenerView, inFlight func() int64) error {
	desc := func(name string) *prometheus.Desc {
		f := family(name)
		return prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return reg.Register(&frontDoor{listeners: listeners, inFlight: inFlight,
		open: desc(ConnectionsOpen), refused: desc(ConnectionsRefusedTotal), bytes: desc(IngestBytesInFlight)})
}

func (f *frontDoor) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.open
	ch <- f.refused
	ch <- f.bytes
}

func (f *frontDoor) Collect(ch chan<- prometheus.Metric) {
	for _, l := range f.listeners() {
		ch <- prometheus.MustNewConstMetric(f.open, prometheus.GaugeValue, float64(l.Open), l.Name)
		ch <- prometheus.MustNewConstMetric(f.refused, prometheus.CounterValue, float64(l.Refused), l.Name)
	}
	ch <- prometheus.MustNewConstMetric(f.bytes, prometheus.GaugeValue, float64(f.inFlight()))
}
