package metrics_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// indexStore has an id index, as the embedded store does.
type indexStore struct{ failures, corrupt atomic.Int64 }

func (s *indexStore) IDIndexFailures() int64    { return s.failures.Load() }
func (s *indexStore) IDIndexCorruptions() int64 { return s.corrupt.Load() }

// spoolStore has a spool, as the ClickHouse store does.
type spoolStore struct {
	rejected, tailsCut atomic.Int64
	// filesRejected and filesTorn are the files its directory holds;
	// unreadable fails its reading.
	filesRejected, filesTorn atomic.Int64
	unreadable               atomic.Bool
}

func (s *spoolStore) SpoolFilesRejected() int64 { return s.rejected.Load() }
func (s *spoolStore) SpoolTailsCut() int64      { return s.tailsCut.Load() }
func (s *spoolStore) SpoolFilesSetAside() (int, int, error) {
	if s.unreadable.Load() {
		return 0, 0, errors.New("permission denied")
	}
	return int(s.filesRejected.Load()), int(s.filesTorn.Load()), nil
}

// logStore acknowledges from a log of limit bytes (0: none).
type logStore struct {
	used  atomic.Int64
	limit int64
}

func (s *logStore) SpoolUsage() (int64, int64) { return s.used.Load(), s.limit }

// optionalSpool is the embedded store: an id index, and a spool when
// spooled.
type optionalSpool struct {
	indexStore
	spoolStore
	logStore
	spooled bool
}

func (s *optionalSpool) Spooled() bool { return s.spooled }

// faultyStore has both.
type faultyStore struct {
	indexStore
	spoolStore
}

// TestWatchStore: each store exports the faults it can have, at zero from
// the start, and every scrape reads the store's count of the moment.
func TestWatchStore(t *testing.T) {
	// The help text is the family's, whatever its words.
	i := slices.IndexFunc(metrics.Families, func(f metrics.Family) bool { return f.Name == metrics.StoreFaultsTotal })
	if i < 0 {
		t.Fatalf("no family %s", metrics.StoreFaultsTotal)
	}
	head := "# HELP " + metrics.StoreFaultsTotal + " " + metrics.Families[i].Help + "\n" +
		"# TYPE " + metrics.StoreFaultsTotal + " counter\n"
	t.Run("embedded", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		st := &indexStore{}
		if err := metrics.WatchStore(reg, st); err != nil {
			t.Fatal(err)
		}
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="id_index_corrupt"} 0
mcpaudit_store_faults_total{fault="id_index_write"} 0
`, metrics.StoreFaultsTotal)
		st.failures.Add(2)
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="id_index_corrupt"} 0
mcpaudit_store_faults_total{fault="id_index_write"} 2
`, metrics.StoreFaultsTotal)
		// A corrupt block is its own fault, not a failed write.
		st.corrupt.Add(1)
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="id_index_corrupt"} 1
mcpaudit_store_faults_total{fault="id_index_write"} 2
`, metrics.StoreFaultsTotal)
	})
	t.Run("clickhouse", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		st := &spoolStore{}
		if err := metrics.WatchStore(reg, st); err != nil {
			t.Fatal(err)
		}
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="spool_file_rejected"} 0
mcpaudit_store_faults_total{fault="spool_tail_cut"} 0
`, metrics.StoreFaultsTotal)
		st.rejected.Add(1)
		st.tailsCut.Add(2)
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="spool_file_rejected"} 1
mcpaudit_store_faults_total{fault="spool_tail_cut"} 2
`, metrics.StoreFaultsTotal)
	})
	t.Run("both", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		st := &faultyStore{}
		if err := metrics.WatchStore(reg, st); err != nil {
			t.Fatal(err)
		}
		st.rejected.Add(3)
		compare(t, reg, head+`mcpaudit_store_faults_total{fault="id_index_corrupt"} 0
mcpaudit_store_faults_total{fault="id_index_write"} 0
mcpaudit_store_faults_total{fault="spool_file_rejected"} 3
mcpaudit_store_faults_total{fault="spool_tail_cut"} 0
`, metrics.StoreFaultsTotal)
	})
	// The files set aside are read at each scrape, not counted: they
	// outlive the process and go when a person moves them out.
	t.Run("files set aside", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		st := &spoolStore{}
		st.filesRejected.Store(2) // left by an earlier run
		if err := metrics.WatchStore(reg, st); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(metrics.Families, func(f metrics.Family) bool { return f.Name == metrics.SpoolFilesSetAside })
		head := "# HELP " + metrics.SpoolFilesSetAside + " " + metrics.Families[i].Help + "\n" +
			"# TYPE " + metrics.SpoolFilesSetAside + " gauge\n"
		compare(t, reg, head+`mcpaudit_spool_files_set_aside{file="rejected"} 2
mcpaudit_spool_files_set_aside{file="torn"} 0
`, metrics.SpoolFilesSetAside)
		st.filesRejected.Store(0) // handled
		st.filesTorn.Store(1)
		compare(t, reg, head+`mcpaudit_spool_files_set_aside{file="rejected"} 0
mcpaudit_spool_files_set_aside{file="torn"} 1
`, metrics.SpoolFilesSetAside)
		// An unreadable directory drops the series, not the scrape.
		st.unreadable.Store(true)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == metrics.SpoolFilesSetAside {
				t.Errorf("an unreadable spool directory still exports %s", mf)
			}
		}
	})
	// The log's usage is read at each scrape; a store without a log (the
	// embedded store acknowledging after commit) exports none.
	t.Run("log usage", func(t *testing.T) {
		head := func(name string) string {
			i := slices.IndexFunc(metrics.Families, func(f metrics.Family) bool { return f.Name == name })
			return "# HELP " + name + " " + metrics.Families[i].Help + "\n# TYPE " + name + " gauge\n"
		}
		reg := prometheus.NewPedanticRegistry()
		st := &logStore{limit: 1 << 30}
		st.used.Store(4096)
		if err := metrics.WatchStore(reg, st); err != nil {
			t.Fatal(err)
		}
		compare(t, reg, head(metrics.SpoolBytes)+"mcpaudit_spool_bytes 4096\n", metrics.SpoolBytes)
		compare(t, reg, head(metrics.SpoolLimitBytes)+"mcpaudit_spool_limit_bytes 1.073741824e+09\n", metrics.SpoolLimitBytes)
		st.used.Store(0) // drained
		compare(t, reg, head(metrics.SpoolBytes)+"mcpaudit_spool_bytes 0\n", metrics.SpoolBytes)

		reg = prometheus.NewPedanticRegistry()
		if err := metrics.WatchStore(reg, &logStore{}); err != nil {
			t.Fatal(err)
		}
		if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
			t.Errorf("a store without a log exports %d families (%v), want none", len(mfs), err)
		}
	})
	// The embedded store has the spool's faults only with its call log.
	t.Run("optional spool", func(t *testing.T) {
		for _, spooled := range []bool{false, true} {
			reg := prometheus.NewPedanticRegistry()
			st := &optionalSpool{spooled: spooled, logStore: logStore{limit: 1 << 20}}
			if err := metrics.WatchStore(reg, st); err != nil {
				t.Fatal(err)
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, mf := range mfs {
				names = append(names, mf.GetName())
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == metrics.LabelFault && l.GetValue() != metrics.FaultIDIndexWrite && l.GetValue() != metrics.FaultIDIndexCorrupt && !spooled {
							t.Errorf("without a spool: %s{fault=%q} exported", mf.GetName(), l.GetValue())
						}
					}
				}
			}
			has := slices.Contains(names, metrics.SpoolBytes) && slices.Contains(names, metrics.SpoolFilesSetAside)
			if has != spooled {
				t.Errorf("spooled %v: families %v", spooled, names)
			}
		}
	})
	t.Run("none", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		if err := metrics.WatchStore(reg, struct{}{}); err != nil {
			t.Fatal(err)
		}
		if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
			t.Errorf("a store without faults exports %d families (%v), want none", len(mfs), err)
		}
	})
	t.Run("twice", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		if err := metrics.WatchStore(reg, &indexStore{}); err != nil {
			t.Fatal(err)
		}
		if err := metrics.WatchStore(reg, &indexStore{}); err == nil {
			t.Error("a second WatchStore on one registry: want an error")
		}
	})
}
