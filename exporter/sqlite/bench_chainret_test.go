package sqlite_test

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
)

// BenchmarkRetention_CallLogChain simulates retention periods of a store
// with its calls in call logs (64 KiB segments, signed): each period
// appends 3,000 calls in blocks of ten and a finding, then runs retention
// cutting at the start of the period before (one period kept, as serve's
// retention keeps its window). It reports, after the last period, the
// records in chain_blocks, the chain's entries, the records in
// chain_pruned and the store file's size (after Close's checkpoint), and
// the mean time of a retention pass (DeleteBefore: rows, logcut, segments,
// the chain's cut and its checkpoint). The same file runs on main, whose
// retention kept every record:
//
//	go test -run '^$' -bench Retention_CallLogChain -benchtime 1x ./exporter/sqlite/
func BenchmarkRetention_CallLogChain(b *testing.B) {
	for _, periods := range []int{5, 10, 20, 40} {
		b.Run("periods="+strconv.Itoa(periods), func(b *testing.B) {
			for range b.N {
				dir, _ := benchPeriods(b, periods, 3000)
				reportChain(b, dir)
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRetention_FirstPassOnOldStore measures the first retention
// pass of this release on a store whose retention kept every record of a
// block and every blocks and logcut entry (40 periods written with that
// behaviour switched back on, sqlite.KeepChainRecords): it prunes them all
// in one transaction.
//
//	go test -run '^$' -bench Retention_FirstPassOnOldStore -benchtime 1x ./exporter/sqlite/
func BenchmarkRetention_FirstPassOnOldStore(b *testing.B) {
	for range b.N {
		restore := sqlite.KeepChainRecords()
		dir, next := benchPeriods(b, 40, 3000)
		restore()
		logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{SegmentBytes: 64 << 10})
		if err != nil {
			b.Fatal(err)
		}
		st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs,
			SigningKey: ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := st.DeleteBefore(context.Background(), next); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "ms/first_pass")
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		reportChain(b, dir)
	}
	b.ReportMetric(0, "ns/op")
}

// benchPeriods writes periods of per calls each with a retention pass
// from the third on, reports the mean time of a pass, and returns the
// data dir and the start of the last period.
func benchPeriods(b *testing.B, periods, per int) (string, time.Time) {
	ctx := context.Background()
	dir := b.TempDir()
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	g, err := storetest.NewGenerator(54, storetest.T0)
	if err != nil {
		b.Fatal(err)
	}
	var starts []time.Time
	var pass time.Duration
	for i := range periods {
		recs := g.Records(per)
		slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
		starts = append(starts, recs[0].Call.Time)
		logs, err := calllogs.Open(calllogs.Dir(dir), calllog.Options{SegmentBytes: 64 << 10})
		if err != nil {
			b.Fatal(err)
		}
		st, err := sqlite.Open(filepath.Join(dir, "audit.db"), sqlite.Options{Calls: sqlite.CallsLog, CallLog: logs, SigningKey: key})
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < per; j += 10 {
			if _, err := st.AppendCalls(ctx, recs[j:j+10]); err != nil {
				b.Fatal(err)
			}
		}
		c := recs[per/2].Call
		if err := st.Commit(ctx, audit.Results{Findings: []audit.Finding{{Kind: audit.KindUnsafeRetry, Severity: audit.SeverityWarning,
			Server: c.Server, Tenant: c.Tenant, Time: c.Time, Calls: []string{c.ID}, Summary: "bench"}}}); err != nil {
			b.Fatal(err)
		}
		if i >= 2 {
			t0 := time.Now()
			if _, err := st.DeleteBefore(ctx, starts[i-1]); err != nil {
				b.Fatal(err)
			}
			pass += time.Since(t0)
		}
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if periods > 2 {
		b.ReportMetric(float64(pass.Microseconds())/1000/float64(periods-2), "ms/pass")
	}
	return dir, starts[len(starts)-1]
}

// reportChain reports the records in chain_blocks and chain_pruned, the
// chain's entries and the store file's size.
func reportChain(b *testing.B, dir string) {
	db, err := sql.Open("sqlite", filepath.Join(dir, "audit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	count := func(table string) float64 {
		var n int64
		if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return float64(n)
	}
	b.ReportMetric(count("chain_blocks"), "chain_blocks")
	b.ReportMetric(count("chain"), "entries")
	b.ReportMetric(count("chain_pruned"), "pruned_records")
	fi, err := os.Stat(filepath.Join(dir, "audit.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size()), "file_bytes")
}
