package api_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestCallsExport_MaxExports: past MaxExports exports whose readers have
// stalled, the next one is refused with 429, Retry-After and a message
// that names the limit; the stalled ones are unaffected (each reads on to
// its end), and once one ends a new one is taken. Each stalled export held
// a page of calls until its page deadline (adv50: 100 stalled exports
// raised serve's heap in use from 104 to 344 MB).
func TestCallsExport_MaxExports(t *testing.T) {
	st := bigStore(t)
	const n = bigCalls
	const max = 2
	q := api.New(st, 0.999)
	q.MaxExports = max
	hs := httptest.NewServer(q.Handler())
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	// stalled starts an export and reads its first record only.
	stalled := func() (*http.Response, *bufio.Reader) {
		resp, err := client.Get(hs.URL + "/api/v1/calls/export")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("export under the cap: %s %s", resp.Status, b)
		}
		r := bufio.NewReader(resp.Body)
		if _, err := r.ReadBytes('\n'); err != nil {
			t.Fatal(err)
		}
		return resp, r
	}
	var resps []*http.Response
	var readers []*bufio.Reader
	for range max {
		resp, r := stalled()
		resps, readers = append(resps, resp), append(readers, r)
	}
	defer func() {
		for _, r := range resps {
			r.Body.Close() // ends a stalled handler at once
		}
	}()
	resp, err := client.Get(hs.URL + "/api/v1/calls/export")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(b), "serve.connections.max_exports") {
		t.Fatalf("export past %d stalled ones: %s Retry-After %q %s; want 429 with Retry-After naming serve.connections.max_exports",
			max, resp.Status, resp.Header.Get("Retry-After"), b)
	}
	// The first stalled export reads on to its end, whole.
	rest, err := io.ReadAll(readers[0])
	resps[0].Body.Close()
	if got := bytes.Count(rest, []byte("\n")); err != nil || got != n-1 {
		t.Fatalf("a stalled export read on after the refusal: %d more records, %v; want %d", got, err, n-1)
	}
	// Its slot is given back as its handler returns, just after the
	// body's end: a new export is taken then (the test's timeout bounds
	// the wait; no time is asserted).
	for {
		resp, err := client.Get(hs.URL + "/api/v1/calls/export?until=2000-01-01T00:00:00Z")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("export after one ended: %s %s", resp.Status, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	resps[1].Body.Close()
}
