package clickhouse

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// TestAckLog_CallsPagesSettleOnce: with Ack "log", a read of calls page by
// page (as /api/v1/calls/export reads) waits for the spool once, at its
// first page, though calls are acknowledged between its pages: a wait per
// page forced an insert per page under ingest. The first page still sees
// every call acknowledged before it.
func TestAckLog_CallsPagesSettleOnce(t *testing.T) {
	o := testOptions(t)
	o.Ack = AckLog
	o.BatchAge = time.Second
	s := openStore(t, o)
	g, err := storetest.NewGenerator(3, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	recs := g.Records(3500)
	if _, err := s.AppendCalls(t.Context(), recs[:2500]); err != nil {
		t.Fatal(err)
	}
	before := s.settles.Load()
	q := audit.CallQuery{Limit: 1000}
	var got, pages int
	for {
		page, err := s.Calls(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got += len(page.Calls)
		if pages == 1 {
			if _, err := s.AppendCalls(t.Context(), recs[2500:]); err != nil {
				t.Fatal(err)
			}
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	if pages < 3 {
		t.Fatalf("%d pages: the read does not test what it should", pages)
	}
	if got < 2500 {
		t.Errorf("read %d calls, want at least the 2500 acknowledged before the read", got)
	}
	if n := s.settles.Load() - before; n != 1 {
		t.Errorf("the read of %d pages waited for the spool %d times, want 1 (its first page)", pages, n)
	}
}
