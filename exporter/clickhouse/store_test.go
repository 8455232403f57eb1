package clickhouse

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

func TestSchema_CreateAndMigrateTwice(t *testing.T) {
	o := testOptions(t)
	for i := range 2 {
		s := openStore(t, o)
		if err := s.Ready(); err != nil {
			t.Fatalf("open %d: Ready: %v", i+1, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	conn := rawConn(t, o.DSN)
	defer conn.Close()
	if n := count(t, conn, "SELECT count() FROM system.tables WHERE database = '"+o.Database+"'"); n != 11 {
		t.Errorf("tables in %s: %d, want 11 (schema_migrations, calls, writes, findings, watermarks, retention_policies, finding_changes, chain, chain_cuts, checkpoints, too_late)", o.Database, n)
	}
	ms, _ := migrations()
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".schema_migrations FINAL"); n != uint64(len(ms)) {
		t.Errorf("schema_migrations holds %d rows, want %d", n, len(ms))
	}
}

// sink collects the detector's output as a store commits it.
type sink struct {
	writes   []audit.Write
	findings []audit.Finding
}

func (s *sink) Call(*audit.Record)                       {}
func (s *sink) Write(w *audit.Write, _ audit.WriteState) { s.writes = append(s.writes, *w) }
func (s *sink) Finding(f *audit.Finding)                 { s.findings = append(s.findings, *f) }

var examples struct {
	sync.Mutex
	calls []*audit.Call
}

// exampleCalls reads every example capture of the repository (once).
func exampleCalls(t testing.TB) []*audit.Call {
	t.Helper()
	examples.Lock()
	defer examples.Unlock()
	if examples.calls != nil {
		return examples.calls
	}
	names, err := filepath.Glob("../../testdata/examples/*.ndjson")
	if err != nil || len(names) == 0 {
		t.Fatalf("no example captures: %v", err)
	}
	sort.Strings(names)
	var calls []*audit.Call
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := capture.NewDecoder(f, name)
		if err != nil {
			t.Fatal(err)
		}
		for {
			c, err := dec.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			calls = append(calls, c)
		}
		f.Close()
	}
	examples.calls = calls
	return calls
}

// ingest stores calls and the detector's output the way the service does:
// records first, then results with the watermark.
func ingest(t testing.TB, s audit.Store, calls []*audit.Call) *sink {
	t.Helper()
	ctx := context.Background()
	reader := dialect.NewReader(dialect.Config{})
	recs := make([]audit.Record, len(calls))
	for i, c := range calls {
		recs[i] = *reader.Read(c)
	}
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatalf("AppendCalls: %v", err)
	}
	out := &sink{}
	e := detect.NewEngine(detect.NewDefaultConfig(), out)
	e.DropRepeatedIDs()
	for i := range recs {
		e.Add("examples", &recs[i], time.Time{})
	}
	e.Flush()
	if err := s.Commit(ctx, audit.Results{Writes: out.writes, Findings: out.findings, Watermark: storetest.MinMark(e)}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return out
}

func TestStore_RoundTripExamples(t *testing.T) {
	o := testOptions(t)
	s := openStore(t, o)
	ctx := context.Background()
	calls := exampleCalls(t)
	out := ingest(t, s, calls)
	if len(out.findings) == 0 || len(out.writes) == 0 {
		t.Fatalf("the examples gave %d writes and %d findings; expected some of each", len(out.writes), len(out.findings))
	}

	t.Run("ScanCalls", func(t *testing.T) {
		// The examples share a few ids (the same trailing calls); the first
		// stored copy wins.
		want := map[string]*audit.Call{}
		for _, c := range calls {
			if want[c.ID] == nil {
				want[c.ID] = c
			}
		}
		var got []*audit.Call
		err := s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
			c := r.Call
			got = append(got, c)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("ScanCalls returned %d calls, want %d distinct", len(got), len(want))
		}
		for i, c := range got {
			if i > 0 && c.Time.Before(got[i-1].Time) {
				t.Errorf("ScanCalls out of time order at %d", i)
			}
			w := want[c.ID]
			if w == nil {
				t.Fatalf("ScanCalls returned unknown call %s", c.ID)
			}
			if !c.Time.Equal(w.Time) {
				t.Errorf("call %s: time %v, want %v", c.ID, c.Time, w.Time)
			}
			cc, ww := *c, *w
			// The response's sum is not stored (audit.Call.RespSum).
			cc.Time, ww.Time, ww.RespSum = time.Time{}, time.Time{}, 0
			if !reflect.DeepEqual(cc, ww) {
				t.Errorf("call %s differs:\n got %+v\nwant %+v", c.ID, cc, ww)
			}
		}
	})

	t.Run("Watermark", func(t *testing.T) {
		wm, err := s.Watermark(ctx)
		if err != nil || wm.IsZero() {
			t.Fatalf("Watermark = %v, %v", wm, err)
		}
		// A second store reads it from ClickHouse, not from memory.
		s2 := openStore(t, o)
		wm2, err := s2.Watermark(ctx)
		if err != nil || !wm2.Equal(wm) {
			t.Errorf("Watermark from ClickHouse = %v, %v; want %v", wm2, err, wm)
		}
	})

	t.Run("Findings", func(t *testing.T) {
		want := map[string]audit.Finding{}
		for _, f := range out.findings {
			want[f.ID()] = f
		}
		var got []audit.Finding
		q := audit.FindingQuery{Limit: 3}
		for {
			page, err := s.Findings(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Findings...)
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
		if len(got) != len(want) {
			t.Fatalf("paged Findings returned %d, want %d", len(got), len(want))
		}
		for _, f := range got {
			w, ok := want[f.ID()]
			if !ok {
				t.Fatalf("unknown finding %+v", f)
			}
			if !f.Time.Equal(w.Time) {
				t.Errorf("finding %s time %v, want %v", f.ID(), f.Time, w.Time)
			}
			f.Time, w.Time = time.Time{}, time.Time{}
			if !reflect.DeepEqual(f, w) {
				t.Errorf("finding differs:\n got %+v\nwant %+v", f, w)
			}
		}
		crit, err := s.Findings(ctx, audit.FindingQuery{Severity: audit.SeverityCritical, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range out.findings {
			if f.Severity == audit.SeverityCritical {
				n++
			}
		}
		if len(crit.Findings) != n {
			t.Errorf("critical findings: %d, want %d", len(crit.Findings), n)
		}
		ids, err := s.FindingIDs(ctx, time.Time{})
		if err != nil || len(ids) != len(want) {
			t.Errorf("FindingIDs = %d ids, %v; want %d", len(ids), err, len(want))
		}
	})

	latest := map[writeKey]audit.Write{}
	for _, w := range out.writes {
		latest[writeKey{w.Tenant, w.CallID, int32(w.Seq)}] = w
	}

	t.Run("Writes", func(t *testing.T) {
		var got []audit.Write
		q := audit.WriteQuery{Limit: 4}
		for {
			page, err := s.Writes(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Writes...)
			if page.NextCursor == "" {
				break
			}
			q.Cursor = page.NextCursor
		}
		if len(got) != len(latest) {
			t.Fatalf("paged Writes returned %d, want %d", len(got), len(latest))
		}
		for _, w := range got {
			want := latest[writeKey{w.Tenant, w.CallID, int32(w.Seq)}]
			if !w.Time.Equal(want.Time) || !w.StateTime.Equal(want.StateTime) {
				t.Errorf("write %s/%d times differ", w.CallID, w.Seq)
			}
			w.Time, w.StateTime, want.Time, want.StateTime = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if !reflect.DeepEqual(w, want) {
				t.Errorf("write differs:\n got %+v\nwant %+v", w, want)
			}
		}
	})

	t.Run("WriteCounts", func(t *testing.T) {
		want := map[audit.WriteState]int64{}
		for _, w := range latest {
			want[w.State]++
		}
		got, err := s.WriteCounts(ctx, audit.CountQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WriteCounts = %v, want %v", got, want)
		}
	})

	t.Run("Timeline", func(t *testing.T) {
		// The document with the most events.
		var doc audit.Finding
		for _, f := range out.findings {
			if f.Document != "" {
				doc = f
				break
			}
		}
		evs, err := eventsOf(s.Timeline(ctx, audit.TimelineQuery{Tenant: doc.Tenant, Document: doc.Document}))
		if err != nil {
			t.Fatal(err)
		}
		types := map[string]int{}
		for i, ev := range evs {
			types[ev.Type]++
			if i > 0 && ev.Time.Before(evs[i-1].Time) {
				t.Errorf("timeline out of order at %d", i)
			}
		}
		if types[audit.EventCall] == 0 || types[audit.EventFinding] == 0 {
			t.Errorf("timeline of %s: %v; want calls and findings", doc.Document, types)
		}
	})

	t.Run("Idempotent", func(t *testing.T) {
		// The same calls and results again store nothing new.
		ingest(t, s, calls)
		conn := rawConn(t, o.DSN)
		defer conn.Close()
		ids := map[string]bool{}
		for _, c := range calls {
			ids[c.ID] = true
		}
		if n := count(t, conn, "SELECT count() FROM "+o.Database+".calls FINAL"); n != uint64(len(ids)) {
			t.Errorf("calls FINAL: %d rows, want %d", n, len(ids))
		}
		if n := count(t, conn, "SELECT count() FROM "+o.Database+".findings FINAL"); n != uint64(len(out.findings)) {
			t.Errorf("findings FINAL: %d rows, want %d", n, len(out.findings))
		}
		if n := count(t, conn, "SELECT count() FROM "+o.Database+".writes FINAL"); n != uint64(len(latest)) {
			t.Errorf("writes FINAL: %d rows, want %d", n, len(latest))
		}
	})

	t.Run("DeleteBefore", func(t *testing.T) {
		times := make([]time.Time, 0, len(calls))
		for _, c := range calls {
			times = append(times, c.Time)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		cut := times[len(times)/2]
		n, err := s.DeleteBefore(ctx, cut)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("DeleteBefore removed nothing")
		}
		left := 0
		err = s.ScanCalls(ctx, time.Time{}, func(r *audit.Record) error {
			c := r.Call
			if c.Time.Before(cut) {
				t.Errorf("call %s at %v survived DeleteBefore(%v)", c.ID, c.Time, cut)
			}
			left++
			return nil
		})
		if err != nil || left == 0 {
			t.Errorf("after DeleteBefore: %d calls left, %v", left, err)
		}
	})
}

// errOnly drops the count of AppendCalls.
func errOnly(_ int, err error) error { return err }

// eventsOf is the events of a timeline page.
func eventsOf(p audit.TimelinePage, err error) ([]audit.TimelineEvent, error) { return p.Events, err }

// TestSchema_MigrateTooLate: a store of the schema before migration 0005
// (0001 to 0004, as the release before wrote them: too_late dropped and
// its record deleted) gains the table at the next start; what it held
// reads back, no call is named too late, and one committed so is read
// back.
func TestSchema_MigrateTooLate(t *testing.T) {
	o := testOptions(t)
	ctx := context.Background()
	s := openStore(t, o)
	r := storetestRecord(t)
	if _, err := s.AppendCalls(ctx, []audit.Record{r}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	conn := rawConn(t, o.DSN)
	defer conn.Close()
	if err := conn.Exec(ctx, "DROP TABLE "+o.Database+".too_late"); err != nil {
		t.Fatal(err)
	}
	mutate(t, conn, o.Database, "ALTER TABLE "+o.Database+".schema_migrations DELETE WHERE version = 5")

	s = openStore(t, o)
	if err := s.Ready(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count() FROM system.tables WHERE database = '"+o.Database+"' AND name = 'too_late'"); n != 1 {
		t.Fatalf("too_late not created by the migration")
	}
	n := 0
	if err := s.ScanCalls(ctx, time.Time{}, func(*audit.Record) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("after the migration %d calls, %v; want 1", n, err)
	}
	if got, err := s.TooLateCalls(ctx, time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("calls too late after the migration: %v, %v; want none", got, err)
	}
	ref := audit.CallRef{Tenant: r.Call.Tenant, ID: r.Call.ID, Time: r.Call.Time}
	if err := s.Commit(ctx, audit.Results{TooLate: []audit.CallRef{ref}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TooLateCalls(ctx, time.Time{}); err != nil || len(got) != 1 || got[0].ID != ref.ID || !got[0].Time.Equal(ref.Time) {
		t.Fatalf("calls too late after a commit: %v, %v; want %v", got, err, ref)
	}
}

// storetestRecord returns one generated call record.
func storetestRecord(t *testing.T) audit.Record {
	t.Helper()
	g, err := storetest.NewGenerator(3, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	return g.Records(1)[0]
}
