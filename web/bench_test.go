package web

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/report"
)

// collector keeps the detector's output until the next commit.
type collector struct{ r audit.Results }

func (c *collector) Call(*audit.Record)                       {}
func (c *collector) Write(w *audit.Write, _ audit.WriteState) { c.r.Writes = append(c.r.Writes, *w) }
func (c *collector) Finding(f *audit.Finding)                 { c.r.Findings = append(c.r.Findings, *f) }

// benchStore returns an embedded store holding a generated mixed capture
// of about one million calls over a week (330,000 sessions; set
// MCPAUDIT_BENCH_SESSIONS for another size, MCPAUDIT_BENCH_ANOMALY for
// another share of sessions with a scenario than 0.1: 0.35 gives about
// 30,000 bad writes), stored as serve stores it: calls appended, the
// detector's writes and findings committed. With MCPAUDIT_BENCH_DIR set,
// the store is kept there and reused.
func benchStore(b *testing.B) (*sqlite.Store, int) {
	b.Helper()
	sessions := 330_000
	if n, _ := strconv.Atoi(os.Getenv("MCPAUDIT_BENCH_SESSIONS")); n > 0 {
		sessions = n
	}
	anomaly, name := 0.1, strconv.Itoa(sessions)
	if f, err := strconv.ParseFloat(os.Getenv("MCPAUDIT_BENCH_ANOMALY"), 64); err == nil && f > 0 && f <= 1 {
		anomaly, name = f, name+"-"+strconv.FormatFloat(f, 'f', -1, 64)
	}
	dir := os.Getenv("MCPAUDIT_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, "mcpaudit-"+name+".db")
	_, statErr := os.Stat(path)
	st, err := sqlite.Open(path, sqlite.Options{Synchronous: "normal"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	if statErr == nil {
		n := 0
		st.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { n++; return nil })
		return st, n
	}
	start := time.Now()
	c := capgen.Generate(capgen.Config{Seed: 11, Sessions: sessions, Span: 7 * 24 * time.Hour, AnomalyRate: anomaly, NoiseRate: 0.002,
		Start: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)})
	dec, err := capture.NewDecoder(bytes.NewReader(bytes.Join(c.Lines, []byte("\n"))), "bench")
	if err != nil {
		b.Fatal(err)
	}
	c.Lines = nil
	reader := dialect.NewReader(dialect.Config{})
	col := &collector{}
	e := detect.NewEngine(detect.NewDefaultConfig(), col)
	e.DropRepeatedIDs()
	var batch []audit.Record
	n := 0
	flush := func() {
		if _, err := st.AppendCalls(ctx, batch); err != nil {
			b.Fatal(err)
		}
		for i := range batch {
			e.Add("bench", &batch[i], time.Time{})
		}
		col.r.Watermark = storetest.MinMark(e)
		if err := st.Commit(ctx, col.r); err != nil {
			b.Fatal(err)
		}
		// The engine keeps the records it waits with: a new batch each time.
		col.r, batch = audit.Results{}, nil
	}
	for {
		call, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if capture.IsReject(err) {
				continue
			}
			b.Fatal(err)
		}
		batch = append(batch, *reader.Read(call))
		n++
		if len(batch) == 2000 {
			flush()
		}
	}
	flush()
	e.Flush()
	flush()
	b.Logf("stored %d calls in %v", n, time.Since(start).Round(time.Second))
	return st, n
}

// BenchmarkViews measures each view of the page over an embedded store of
// about one million calls: one op is one GET answered in full.
//
//	go test ./web -run '^$' -bench Views -benchtime 20x
func BenchmarkViews(b *testing.B) {
	st, n := benchStore(b)
	ctx := context.Background()
	q := api.New(st, 0.999)
	wm, _ := st.Watermark(ctx)
	q.Now = func() time.Time { return wm }
	p, err := New(st, q, NewDefaultConfig(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	// Pick the views' subjects from the data: the newest double-applied
	// write, its document and session.
	page, err := st.Findings(ctx, audit.FindingQuery{Kind: audit.KindDoubleAppliedWrite, Newest: true, Limit: 1})
	if err != nil || len(page.Findings) == 0 {
		b.Fatalf("no double-applied write in the store: %v", err)
	}
	f := page.Findings[0]
	counts, _ := st.WriteCounts(ctx, audit.CountQuery{})
	var writes int64
	for _, c := range counts {
		writes += c
	}
	b.Logf("%d calls, %d writes; views of finding %s on %s, session %s", n, writes, f.ID(), f.Document, f.Session)
	views := []struct{ name, path string }{
		{"index", "/"},
		{"index_filtered", "/?kind=unverified_write&server=thegram"},
		{"index_page_5", ""},
		{"document", "/documents/" + url.PathEscape(f.Document)},
		{"session", "/sessions/" + url.PathEscape(f.Session)},
		{"finding", "/findings/" + f.ID()},
		{"call_payload", "/calls/" + f.Calls[0] + "?fragment=1"},
		{"slo", "/slo"},
	}
	// The fifth page of findings, through the cursors the page links.
	cur := ""
	for range 4 {
		fp, _ := st.Findings(ctx, audit.FindingQuery{Newest: true, Limit: 50, Cursor: cur})
		cur = fp.NextCursor
	}
	views[2].path = "/?cursor=" + url.QueryEscape(cur)
	for _, v := range views {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(srv.URL + v.path)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("GET %s: %s", v.path, resp.Status)
				}
			}
		})
	}
	// The report of /slo alone: 30 days, no retry mix.
	b.Run("report_30d", func(b *testing.B) {
		for b.Loop() {
			if _, err := report.Build(ctx, st, report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: wm, Target: 0.999, SkipFailures: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("report_3650d", func(b *testing.B) {
		for b.Loop() {
			if _, err := report.Build(ctx, st, report.Query{Window: 3650 * 24 * time.Hour, WindowName: "3650d", Until: wm, Target: 0.999}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
