package api_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// failingPages is a real store whose Calls fails from its second page on.
// The fault is injected: a real store that breaks between two pages of one
// request (a disk that fails, a ClickHouse that goes away) cannot be had
// on demand.
type failingPages struct{ audit.Store }

func (f failingPages) Calls(ctx context.Context, q audit.CallQuery) (audit.CallPage, error) {
	if q.Cursor != "" {
		return audit.CallPage{}, errors.Join(audit.ErrUnavailable, errors.New("the disk went away"))
	}
	return f.Store.Calls(ctx, q)
}

// TestCallsExport_Pages: the export streams every page of the store as
// call records, one a line; a store that fails before the first record is
// a 503, and one that fails after it breaks the body off, so that the
// client cannot take a partial export for a whole one.
func TestCallsExport_Pages(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g, err := storetest.NewGenerator(3, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendCalls(ctx, g.Records(2500)); err != nil {
		t.Fatal(err)
	}
	get := func(s audit.Store, query string) (*http.Response, []byte, error) {
		hs := httptest.NewServer(api.New(s, 0.999).Handler())
		defer hs.Close()
		resp, err := http.Get(hs.URL + "/api/v1/calls/export" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	resp, b, err := get(st, "")
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %v %s %q", err, resp.Status, resp.Header.Get("Content-Type"))
	}
	if n := bytes.Count(b, []byte("\n")); n != 2500 {
		t.Errorf("export: %d records, want 2500 (three pages)", n)
	}
	resp, b, err = get(failingPages{st}, "")
	if err == nil {
		t.Errorf("export of a store failing at its second page: a whole body of %d records, %s", bytes.Count(b, []byte("\n")), resp.Status)
	}
	if n := bytes.Count(b, []byte("\n")); n != 1000 {
		t.Errorf("export of a store failing at its second page: %d records before the break, want 1000", n)
	}
	resp, b, _ = get(failingPages{st}, "?until=2000-01-01T00:00:00Z&since=2000-01-02T00:00:00Z")
	if resp.StatusCode != 400 {
		t.Errorf("an empty range: %s %s, want 400", resp.Status, b)
	}
	resp, b, _ = get(st, "?limit=5")
	if resp.StatusCode != 400 || !bytes.Contains(b, []byte("unknown parameter")) {
		t.Errorf("limit: %s %s, want 400 (the export has no limit)", resp.Status, b)
	}
}

// TestCallsExport_OutlastsWriteTimeout: an export takes as long as the
// store is large and the reader is slow; the listener's write timeout
// bounds each page, not the whole answer.
func TestCallsExport_OutlastsWriteTimeout(t *testing.T) {
	st := bigStore(t)
	q := api.New(st, 0.999)
	q.PageTimeout = time.Minute
	hs := httptest.NewUnstartedServer(q.Handler())
	// As serve's API listener, with a write timeout the export outlasts.
	hs.Config.WriteTimeout = 300 * time.Millisecond
	hs.Start()
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/api/v1/calls/export")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	// A reader slower than the write timeout.
	time.Sleep(time.Second)
	rest, err := io.ReadAll(r)
	if got := bytes.Count(rest, []byte("\n")); err != nil || got != bigCalls-1 {
		t.Fatalf("after a pause longer than the write timeout: %d more records, %v; want %d", got, err, bigCalls-1)
	}
}

// bigCalls is the number of calls of bigStore: more than the loopback's
// socket buffers hold (about 25 MB) as records, so that an export's
// handler is still writing when its reader pauses.
const bigCalls = 40000

// bigStore returns an embedded store holding bigCalls calls.
func bigStore(t *testing.T) *sqlite.Store {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g, err := storetest.NewGenerator(3, storetest.T0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < bigCalls; i += 5000 {
		if _, err := st.AppendCalls(context.Background(), g.Records(5000)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}
