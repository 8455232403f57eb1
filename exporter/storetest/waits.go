package storetest

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// WaitsOfPagedRead reads every call of s page by page (1000 a page, as
// /api/v1/calls/export reads), appending more between its first and
// second page, and fails t unless the read waited for the acknowledged
// calls to be stored once: at its first page. waits counts the store's
// waits (a store with ack "log" waits for its log or spool to be
// committed); the first page must still see the calls of before: calls,
// at least 2500, appended before the read, and more, after its first
// page.
func WaitsOfPagedRead(t *testing.T, s audit.Store, before, after []audit.Record, waits func() int64) {
	t.Helper()
	if _, err := s.AppendCalls(t.Context(), before); err != nil {
		t.Fatal(err)
	}
	start := waits()
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
			if _, err := s.AppendCalls(t.Context(), after); err != nil {
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
	if got < len(before) {
		t.Errorf("read %d calls, want at least the %d acknowledged before the read", got, len(before))
	}
	if n := waits() - start; n != 1 {
		t.Errorf("the read of %d pages waited for the acknowledged calls %d times, want 1 (its first page)", pages, n)
	}
}
