package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// IDIndexFaulter is a store with a call id index whose writes may fail
// without failing an append: the embedded store.
type IDIndexFaulter interface {
	// IDIndexFailures returns how many writes of the index failed since
	// the store was opened. It is safe for concurrent use.
	IDIndexFailures() int64
}

// SpoolRejecter is a store that moves aside spool files it cannot deliver:
// the ClickHouse store.
type SpoolRejecter interface {
	// SpoolFilesRejected returns how many spool files were moved aside
	// since the store was opened. It is safe for concurrent use.
	SpoolFilesRejected() int64
}

// IDIndexCorrupter is a store with a call id index that may meet corrupt
// blocks: the embedded store.
type IDIndexCorrupter interface {
	// IDIndexCorruptions returns how many corrupt blocks of the index were
	// met since the store was opened. It is safe for concurrent use.
	IDIndexCorruptions() int64
}

// SpoolTailCutter is a store whose spool recovery cuts torn tails off its
// segments: the ClickHouse store.
type SpoolTailCutter interface {
	// SpoolTailsCut returns how many torn tails recovery cut off spool
	// segments since the store was opened. It is safe for concurrent use.
	SpoolTailsCut() int64
}

// SpoolSetAside is a store whose spool sets files aside for a person: the
// ClickHouse store.
type SpoolSetAside interface {
	// SpoolFilesSetAside returns how many rejected batches and cut tails
	// the spool directory holds now. It reads the directory, and is safe
	// for concurrent use.
	SpoolFilesSetAside() (rejected, torn int, err error)
}

// SpoolUser is a store that acknowledges calls from a local log before
// storing them: the ClickHouse store, the embedded store with ack "log".
type SpoolUser interface {
	// SpoolUsage returns the bytes the log holds and its limit; a limit of
	// 0 is no log (the embedded store with ack "commit"). It is safe for
	// concurrent use.
	SpoolUsage() (bytes, limit int64)
}

// SpoolOptional is a store that has a spool only in some configurations:
// the embedded store, with its call log. Spooled reports whether it has
// one (or one left by an earlier run); the spool's faults, files and
// usage are exported only then.
type SpoolOptional interface {
	Spooled() bool
}

// storeFaults exports the store's fault counts, read at each scrape: the
// store keeps them, and is opened before the metrics exist.
type storeFaults struct {
	desc   *prometheus.Desc
	counts []func() int64 // by fault, as in faults
	faults []string
}

// WatchStore has reg export StoreFaultsTotal for store, read from it at
// each scrape: one series, from zero, for each fault the store can have
// (FaultIDIndexWrite for an IDIndexFaulter, FaultIDIndexCorrupt for an
// IDIndexCorrupter, FaultSpoolFileRejected for a SpoolRejecter,
// FaultSpoolTailCut for a SpoolTailCutter), SpoolFilesSetAside for a
// SpoolSetAside, and SpoolBytes and SpoolLimitBytes for a SpoolUser with
// a log; the last four not for a SpoolOptional without a spool. A store
// that can have none exports nothing.
func WatchStore(reg prometheus.Registerer, store any) error {
	f := family(StoreFaultsTotal)
	c := &storeFaults{desc: prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)}
	if s, ok := store.(IDIndexFaulter); ok {
		c.faults = append(c.faults, FaultIDIndexWrite)
		c.counts = append(c.counts, s.IDIndexFailures)
	}
	if s, ok := store.(IDIndexCorrupter); ok {
		c.faults = append(c.faults, FaultIDIndexCorrupt)
		c.counts = append(c.counts, s.IDIndexCorruptions)
	}
	spooled := true
	if s, ok := store.(SpoolOptional); ok {
		spooled = s.Spooled()
	}
	if s, ok := store.(SpoolRejecter); ok && spooled {
		c.faults = append(c.faults, FaultSpoolFileRejected)
		c.counts = append(c.counts, s.SpoolFilesRejected)
	}
	if s, ok := store.(SpoolTailCutter); ok && spooled {
		c.faults = append(c.faults, FaultSpoolTailCut)
		c.counts = append(c.counts, s.SpoolTailsCut)
	}
	if s, ok := store.(SpoolSetAside); ok && spooled {
		f := family(SpoolFilesSetAside)
		if err := reg.Register(&setAside{desc: prometheus.NewDesc(f.Name, f.Help, f.Labels, nil), store: s}); err != nil {
			return err
		}
	}
	if s, ok := store.(SpoolUser); ok && spooled {
		if _, limit := s.SpoolUsage(); limit > 0 {
			used, lim := family(SpoolBytes), family(SpoolLimitBytes)
			if err := reg.Register(&spoolUsage{
				used:  prometheus.NewDesc(used.Name, used.Help, used.Labels, nil),
				limit: prometheus.NewDesc(lim.Name, lim.Help, lim.Labels, nil),
				store: s,
			}); err != nil {
				return err
			}
		}
	}
	if len(c.faults) == 0 {
		return nil
	}
	return reg.Register(c)
}

// spoolUsage exports a store's log usage, read at each scrape.
type spoolUsage struct {
	used, limit *prometheus.Desc
	store       SpoolUser
}

func (c *spoolUsage) Describe(ch chan<- *prometheus.Desc) { ch <- c.used; ch <- c.limit }

func (c *spoolUsage) Collect(ch chan<- prometheus.Metric) {
	used, limit := c.store.SpoolUsage()
	ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(used))
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(limit))
}

// setAside exports the files a spool holds set aside, read at each scrape.
type setAside struct {
	desc  *prometheus.Desc
	store SpoolSetAside
}

func (c *setAside) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect exports nothing when the directory cannot be read: the store's
// own errors (its appends and drain) say why.
func (c *setAside) Collect(ch chan<- prometheus.Metric) {
	rejected, torn, err := c.store.SpoolFilesSetAside()
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(rejected), FileRejected)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(torn), FileTorn)
}

func (c *storeFaults) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *storeFaults) Collect(ch chan<- prometheus.Metric) {
	for i, fault := range c.faults {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.counts[i]()), fault)
	}
}
