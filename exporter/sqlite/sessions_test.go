package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/mcpaudit/mcpaudit/audit"
)

// checkSessIndex checks that the session entries of s's index are exactly
// those of the calls stored: one per call with a session, at its session's
// hash, tenant, time and rid.
func checkSessIndex(t *testing.T, s *Store) {
	t.Helper()
	rows, err := s.r.Query(`SELECT rid, id, tenant, time, rec FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var rid, tenant, tm int64
		var id any
		var blob []byte
		if err := rows.Scan(&rid, &id, &tenant, &tm, &blob); err != nil {
			t.Fatal(err)
		}
		var rec audit.Record
		if _, err := decodeCall(nil, id, tm, blob, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Call.Session != "" {
			want = append(want, fmt.Sprintf("%d/%d/%d/%d", sessionHash(rec.Call.Session), tenant, tm, rid))
		}
	}
	rows.Close()
	got := sessEntries(t, s)
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatal("no call has a session: the check checks nothing")
	}
	if !slices.Equal(got, want) {
		t.Errorf("session entries:\n %v\nwant those of the stored calls:\n %v", got, want)
	}
}

// sessEntries returns the session entries of s's index, sorted.
func sessEntries(t *testing.T, s *Store) []string {
	t.Helper()
	it, err := s.ids.db.NewIter(&pebble.IterOptions{LowerBound: []byte{sessKind}, UpperBound: []byte{sessKind + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	got := []string{}
	for ok := it.First(); ok; ok = it.Next() {
		tenant, tm, rid, ok := parseSessKey(it.Key())
		if !ok {
			t.Fatalf("bad session key %x", it.Key())
		}
		got = append(got, fmt.Sprintf("%d/%d/%d/%d", int32(uint32(it.Key()[1])<<24|uint32(it.Key()[2])<<16|uint32(it.Key()[3])<<8|uint32(it.Key()[4])), tenant, tm, rid))
	}
	slices.Sort(got)
	return got
}

// sessionTraffic appends 400 generated calls, the first 150 again as
// tenant acme's (the same sessions in two tenants), in two batches, and
// returns them.
func sessionTraffic(t *testing.T, s *Store) []audit.Record {
	t.Helper()
	recs := records(t, 400)
	recs = append(recs, withTenant(recs[:150], "acme")...)
	if _, err := s.AppendCalls(context.Background(), recs[:250]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(context.Background(), recs[250:]); err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestSessIndex_ReadPaths: a session's calls, page by page and for each
// tenant, are those of the records appended, whether they are read from
// the index, from the rows past its mark, or through session_minutes (no
// index), with a stale entry and in small batches. With session_minutes
// emptied the index alone answers the same, and the path without it then
// finds nothing: the answers do come from the index.
func TestSessIndex_ReadPaths(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := sessionTraffic(t, s)
	checkSessIndex(t, s)
	type key struct{ session, tenant string }
	want := map[key][]string{}
	for _, r := range recs {
		want[key{r.Call.Session, ""}] = append(want[key{r.Call.Session, ""}], r.Call.ID)
		if tn := r.Call.Tenant; tn != "" {
			want[key{r.Call.Session, tn}] = append(want[key{r.Call.Session, tn}], r.Call.ID)
		}
	}
	var keys []key
	for k := range want {
		if k.session != "" && (len(keys) < 12 || len(want[k]) == 1 && len(keys) < 16) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.session+"/"+a.tenant, b.session+"/"+b.tenant) })
	read := func(k key) [][]string {
		var pages [][]string
		q := audit.CallQuery{Session: k.session, Tenant: k.tenant, Limit: 2}
		for {
			p, err := s.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range p.Calls {
				if r.Call.Session != k.session {
					t.Fatalf("session %s: call %s of session %s", k.session, r.Call.ID, r.Call.Session)
				}
				ids = append(ids, r.Call.ID)
			}
			pages = append(pages, ids)
			if p.NextCursor == "" {
				return pages
			}
			q.Cursor = p.NextCursor
		}
	}
	first := map[key][][]string{}
	for _, k := range keys {
		pages := read(k)
		var got []string
		for _, p := range pages {
			got = append(got, p...)
		}
		w := slices.Clone(want[k])
		slices.Sort(w)
		slices.Sort(got)
		if !slices.Equal(got, w) {
			t.Fatalf("session %s of tenant %q through the index: %v, want %v", k.session, k.tenant, got, w)
		}
		first[k] = pages
	}
	check := func(path string) {
		t.Helper()
		for _, k := range keys {
			if got := read(k); !reflect.DeepEqual(got, first[k]) {
				t.Errorf("%s: session %s of tenant %q reads\n %v\nwant\n %v", path, k.session, k.tenant, got, first[k])
			}
		}
	}
	// A stale entry (a rid stored under another session) is checked
	// against its row and skipped.
	if err := s.ids.db.Set(sessKey(nil, sessionHash(keys[0].session), 0, recs[0].Call.Time.UnixNano(), 7), nil, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	check("with a stale entry")
	readPaths(s, 200, 50, false, check)

	// The index alone: session_minutes emptied.
	if _, err := s.inv.db.Exec(`DELETE FROM session_minutes`); err != nil {
		t.Fatal(err)
	}
	check("without session_minutes")
	x := s.ids
	s.ids = nil
	if got := read(keys[0]); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("without the index nor session_minutes, session %s reads %v: the answers above were not the index's", keys[0].session, got)
	}
	s.ids = x
}

// TestSessIndex_Rebuilt: the session entries are built again at open when
// the index directory is removed, and when the index is of format 1 (ids
// and documents only, as this store's releases before the session entries
// wrote it), which is logged with the reason.
func TestSessIndex_Rebuilt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sessionTraffic(t, s)
	want := sessEntries(t, s)
	s.Close()
	if err := os.RemoveAll(IDIndexDir(path)); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	checkSessIndex(t, s)
	if got := sessEntries(t, s); !slices.Equal(got, want) {
		t.Errorf("rebuilt: %d session entries, want %d", len(got), len(want))
	}
	// An older release reads the epoch under the legacy key: this one
	// leaves none there, so that such a release rebuilds the index (as
	// format 1) rather than append calls without session entries to it.
	metaKeys := func() []string {
		t.Helper()
		var keys []string
		rows, err := s.r.Query(`SELECT key FROM meta WHERE key LIKE 'ids_epoch%' ORDER BY key`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		return keys
	}
	if got := metaKeys(); !slices.Equal(got, []string{idsEpochMeta}) {
		t.Errorf("epoch keys in meta: %v, want only %s", got, idsEpochMeta)
	}
	// Format 1, as such a release rebuilds it: no format key, no session
	// entries, its epoch under the legacy key.
	epoch, err := s.ids.get(idsEpochKey)
	if err != nil {
		t.Fatal(err)
	}
	b := s.ids.db.NewBatch()
	b.Delete(idsFormatKey, nil)
	b.DeleteRange([]byte{sessKind}, []byte{sessKind + 1}, nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if got := sessEntries(t, s); len(got) != 0 {
		t.Fatalf("%d session entries left", len(got))
	}
	s.Close()
	db := side(t, path)
	if _, err := db.Exec(`UPDATE meta SET key = ?, value = ? WHERE key = ?`, idsEpochLegacy, epoch, idsEpochMeta); err != nil {
		t.Fatal(err)
	}
	db.Close()
	var log bytes.Buffer
	if s, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSessIndex(t, s)
	if got := metaKeys(); !slices.Equal(got, []string{idsEpochMeta}) {
		t.Errorf("epoch keys in meta after the rebuild: %v, want only %s", got, idsEpochMeta)
	}
	if !strings.Contains(log.String(), "index format 1, this version's is 2") {
		t.Errorf("the rebuild of a format-1 index is not logged with its reason:\n%s", log.String())
	}
	if _, err := s.inv.db.Exec(`DELETE FROM session_minutes`); err != nil {
		t.Fatal(err)
	}
	r := records(t, 1)[0]
	p, err := s.Calls(context.Background(), audit.CallQuery{Session: r.Call.Session})
	if err != nil || len(p.Calls) == 0 {
		t.Errorf("session %s after the rebuild: %d calls, %v", r.Call.Session, len(p.Calls), err)
	}
}

// TestSessIndex_Retention: retention deletes the session entries of the
// calls it deletes, per tenant, and leaves the others'.
func TestSessIndex_Retention(t *testing.T) {
	s := openTemp(t, Options{DeleteChunk: 7})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 120)
	slices.SortFunc(recs, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
	if _, err := s.AppendCalls(ctx, append(slices.Clone(recs), withTenant(recs[:60], "acme")...)); err != nil {
		t.Fatal(err)
	}
	before := len(sessEntries(t, s))
	if _, err := s.DeleteTenantBefore(ctx, "acme", recs[50].Call.Time); err != nil {
		t.Fatal(err)
	}
	checkSessIndex(t, s)
	if _, err := s.DeleteBefore(ctx, recs[30].Call.Time, "acme"); err != nil {
		t.Fatal(err)
	}
	checkSessIndex(t, s)
	if after := len(sessEntries(t, s)); after >= before-60 {
		t.Errorf("%d session entries after retention, %d before: want at least 60 fewer", after, before)
	}
}

// TestIndex_StaleEntryOfAnotherCall: an entry whose rid is now another
// call's row, of a later time (a stale entry, its call deleted and its rid
// taken again), is not read as a call of the span: its row, sorted at its
// own time, ended a batch, and a page's cursor after it skipped every call
// of the session or document between the entry's time and the row's. A
// session and a document of 4 calls or more, read two calls a page,
// three entries a batch.
func TestIndex_StaleEntryOfAnotherCall(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 400)
	if _, err := s.AppendCalls(ctx, recs); err != nil {
		t.Fatal(err)
	}
	type row struct{ rid, time, tenant int64 }
	rowOf := map[string]row{}
	rows, err := s.r.Query(`SELECT rid, id, tenant, time, rec FROM calls`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r row
		var id any
		var blob []byte
		if err := rows.Scan(&r.rid, &id, &r.tenant, &r.time, &blob); err != nil {
			t.Fatal(err)
		}
		var rec audit.Record
		if _, err := decodeCall(nil, id, r.time, blob, &rec); err != nil {
			t.Fatal(err)
		}
		rowOf[rec.Call.ID] = r
	}
	rows.Close()
	defer func(n int) { docBatchSize = n }(docBatchSize)
	docBatchSize = 3

	// The stale entry names the row of the latest call of all.
	latest := recs[0].Call
	for _, r := range recs {
		if r.Call.Time.After(latest.Time) {
			latest = r.Call
		}
	}
	// pick returns the first group by name of 4 calls or more without the
	// latest call, its calls in time order.
	pick := func(t *testing.T, groups map[string][]audit.Record) (string, []audit.Record) {
		var names []string
		for name, g := range groups {
			if len(g) >= 4 && !slices.ContainsFunc(g, func(r audit.Record) bool { return r.Call.ID == latest.ID }) {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			t.Fatal("no group of 4 calls: the test tests nothing")
		}
		slices.Sort(names)
		g := groups[names[0]]
		slices.SortFunc(g, func(a, b audit.Record) int { return a.Call.Time.Compare(b.Call.Time) })
		return names[0], g
	}
	read := func(q audit.CallQuery) []string {
		var ids []string
		for {
			p, err := s.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range p.Calls {
				ids = append(ids, r.Call.ID)
			}
			if p.NextCursor == "" {
				return ids
			}
			q.Cursor = p.NextCursor
		}
	}
	idsOf := func(g []audit.Record) []string {
		var ids []string
		for _, r := range g {
			ids = append(ids, r.Call.ID)
		}
		return ids
	}
	stale := rowOf[latest.ID]

	sessions := map[string][]audit.Record{}
	docs := map[string][]audit.Record{}
	for _, r := range recs {
		if r.Call.Session != "" {
			sessions[r.Call.Session] = append(sessions[r.Call.Session], r)
		}
		for _, d := range r.Documents() {
			docs[d] = append(docs[d], r)
		}
	}
	t.Run("session", func(t *testing.T) {
		name, g := pick(t, sessions)
		first := rowOf[g[0].Call.ID]
		if err := s.ids.db.Set(sessKey(nil, sessionHash(name), first.tenant, first.time+1, stale.rid), nil, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if got, want := read(audit.CallQuery{Session: name, Limit: 2}), idsOf(g); !slices.Equal(got, want) {
			t.Errorf("session %s reads\n %v\nwant\n %v", name, got, want)
		}
	})
	t.Run("document", func(t *testing.T) {
		name, g := pick(t, docs)
		first := rowOf[g[0].Call.ID]
		if err := s.ids.db.Set(docKey(nil, docHash(name), first.time+1, stale.rid), nil, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if got, want := read(audit.CallQuery{Document: name, Limit: 2}), idsOf(g); !slices.Equal(got, want) {
			t.Errorf("document %s reads\n %v\nwant\n %v", name, got, want)
		}
	})
}
