package sqlite

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestDocIndex_ReadPaths: a document's timeline and its calls, page by
// page, are the same whether they are read from the index, from the rows
// past its mark (index writes lost), or by scanning the calls (no index:
// another store holds it), and a stale entry changes nothing. Each call
// list is checked against the records appended.
func TestDocIndex_ReadPaths(t *testing.T) {
	s := openTemp(t, Options{})
	defer s.Close()
	ctx := context.Background()
	recs := records(t, 400)
	// Two batches, so that the mark can be set between them.
	if _, err := s.AppendCalls(ctx, recs[:250]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCalls(ctx, recs[250:]); err != nil {
		t.Fatal(err)
	}
	byDoc := map[string][]string{}
	for _, r := range recs {
		for _, d := range r.Documents() {
			byDoc[d] = append(byDoc[d], r.Call.ID)
		}
	}
	var docs []string
	for d, ids := range byDoc {
		if len(ids) >= 3 {
			docs = append(docs, d)
		}
	}
	slices.Sort(docs)
	if len(docs) < 5 {
		t.Fatalf("%d documents with 3 calls or more, want 5 at least", len(docs))
	}
	docs = docs[:5]

	type answer struct {
		timeline []audit.TimelineEvent
		pages    [][]string // ids of each page of 2
	}
	read := func(doc string) answer {
		var a answer
		var err error
		if a.timeline, err = eventsOf(s.Timeline(ctx, audit.TimelineQuery{Document: doc})); err != nil {
			t.Fatal(err)
		}
		q := audit.CallQuery{Document: doc, Limit: 2}
		for {
			p, err := s.Calls(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, r := range p.Calls {
				ids = append(ids, r.Call.ID)
			}
			a.pages = append(a.pages, ids)
			if p.NextCursor == "" {
				return a
			}
			q.Cursor = p.NextCursor
		}
	}
	want := map[string]answer{}
	for _, doc := range docs {
		a := read(doc)
		var got []string
		for _, p := range a.pages {
			got = append(got, p...)
		}
		w := slices.Clone(byDoc[doc])
		slices.Sort(w)
		slices.Sort(got)
		if !slices.Equal(got, w) {
			t.Fatalf("calls on %s through the index: %v, want %v", doc, got, w)
		}
		if len(a.timeline) < len(w) {
			t.Fatalf("timeline of %s has %d events for %d calls", doc, len(a.timeline), len(w))
		}
		want[doc] = a
	}
	check := func(path string) {
		t.Helper()
		for _, doc := range docs {
			if got := read(doc); !reflect.DeepEqual(got, want[doc]) {
				t.Errorf("%s: %s reads\n %+v\nwant\n %+v", path, doc, got, want[doc])
			}
		}
	}

	// A stale entry (a deleted call's rid, the hash of a document read)
	// is checked against the rows and skipped.
	if err := s.ids.db.Set(docKey(nil, docHash(docs[0]), recs[0].Call.Time.UnixNano(), 100000), nil, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	check("with a stale entry")

	// The second batch found past the mark (its entries in the index not
	// used), no index (the calls scanned by time), batches smaller than a
	// page and than a document's calls, with marks inside the documents'
	// conversations: their calls come from both sides.
	readPaths(s, 150, 10, true, check)
}

// readPaths has check read as the index's paths of reading go: the index
// marked behind by behind calls, marked at 0, no index; then in batches of
// 1, 2 and 3 entries, with the mark at every step calls and, if
// withoutIndex, without the index. It leaves s as it found it.
func readPaths(s *Store, behind, step int64, withoutIndex bool, check func(path string)) {
	mark := s.ids.mark.Load()
	s.ids.mark.Store(mark - behind)
	check("past the mark")
	s.ids.mark.Store(0)
	check("all past the mark")
	s.ids.mark.Store(mark)
	x := s.ids
	s.ids = nil
	check("without the index")
	s.ids = x
	defer func(n int) { docBatchSize = n }(docBatchSize)
	for _, n := range []int{1, 2, 3} {
		docBatchSize = n
		check("in batches of " + strconv.Itoa(n))
		for m := int64(0); m < mark; m += step {
			s.ids.mark.Store(m)
			check("in batches of " + strconv.Itoa(n) + ", past the mark " + strconv.FormatInt(m, 10))
		}
		s.ids.mark.Store(mark)
		if withoutIndex {
			s.ids = nil
			check("in batches of " + strconv.Itoa(n) + ", without the index")
			s.ids = x
		}
	}
}
