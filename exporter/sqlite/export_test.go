package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestReadCalls reads a store file that a store keeps writing: every
// filter gives the calls the store's own Calls gives, in its order, and
// the calls appended while the read is under way are not in it (one
// snapshot).
func TestReadCalls(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mcpaudit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := records(t, 3000)
	if _, err := s.AppendCalls(ctx, recs[:2000]); err != nil {
		t.Fatal(err)
	}
	// The store's answer, page by page.
	viaStore := func(q audit.CallQuery) []string {
		var ids []string
		q.Limit = 1000
		for {
			page, err := s.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Calls {
				ids = append(ids, r.Call.ID)
			}
			if page.NextCursor == "" {
				return ids
			}
			q.Cursor = page.NextCursor
		}
	}
	read := func(q audit.CallQuery, during func()) []string {
		var ids []string
		err := ReadCalls(ctx, path, q, func(r *audit.Record) error {
			if during != nil && len(ids) == 0 {
				during()
			}
			if r.Call.Arguments == nil && r.Call.Result == nil {
				t.Errorf("call %s read without its payloads", r.Call.ID)
			}
			ids = append(ids, r.Call.ID)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	mid := recs[1000].Call.Time
	some := recs[7].Call
	for _, q := range []audit.CallQuery{
		{},
		{Since: mid},
		{Until: mid},
		{Since: recs[300].Call.Time, Until: recs[900].Call.Time},
		{Server: some.Server},
		{Session: some.Session},
		{Tenant: some.Tenant, Server: some.Server},
		{Tenant: "no such tenant"},
	} {
		want, got := viaStore(q), read(q, nil)
		if !slices.Equal(got, want) {
			t.Errorf("ReadCalls(%+v): %d calls, the store's Calls %d (or another order)", q, len(got), len(want))
		}
	}
	if n := len(read(audit.CallQuery{}, nil)); n != 2000 {
		t.Fatalf("ReadCalls read %d calls of 2000", n)
	}
	// Calls committed while the read runs are after its snapshot.
	got := read(audit.CallQuery{}, func() {
		if _, err := s.AppendCalls(ctx, recs[2000:]); err != nil {
			t.Fatal(err)
		}
	})
	if len(got) != 2000 {
		t.Errorf("a read during an append read %d calls, want the 2000 of its snapshot", len(got))
	}
	if n := len(read(audit.CallQuery{Since: time.Time{}}, nil)); n != 3000 {
		t.Errorf("a read after the append read %d calls, want 3000", n)
	}
}
