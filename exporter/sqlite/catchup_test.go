package sqlite

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestAckLog_CallsPagesCatchUpOnce: with ack "log", a read of calls page
// by page (as /api/v1/calls/export reads) waits for the call log once, at
// its first page, though calls are acknowledged between its pages: a wait
// per page forced a small commit per page under ingest (adv50: 92 s for
// 200k calls beside ingest against 8–11 s idle). The first page still sees
// every call acknowledged before it.
func TestAckLog_CallsPagesCatchUpOnce(t *testing.T) {
	s := openTemp(t, Options{Ack: AckLog})
	defer s.Close()
	recs := records(t, 3500)
	if _, err := s.AppendCalls(t.Context(), recs[:2500]); err != nil {
		t.Fatal(err)
	}
	before := s.catchUps.Load()
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
			// Acknowledged after the read began: later pages need not
			// wait for these.
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
	if n := s.catchUps.Load() - before; n != 1 {
		t.Errorf("the read of %d pages waited for the call log %d times, want 1 (its first page)", pages, n)
	}
}
