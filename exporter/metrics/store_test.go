package metrics_test

import (
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
type spoolStore struct{ rejected, tailsCut atomic.Int64 }

func (s *spoolStore) SpoolFilesRejected() int64 { return s.rejected.Load() }
func (s *spoolStore) SpoolTailsCut() int64      { return s.tailsCut.Load() }

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
