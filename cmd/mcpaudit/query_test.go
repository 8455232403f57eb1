package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestQueryCommands: findings, timeline and slo answer the same through a
// running server and straight from its data dir, in text and JSON.
func TestQueryCommands(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	s := startTest(t, cfg)
	recs := mergedCapture(t)
	resp := postCalls(t, s, ndjson(recs), false)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	want := analyzeFindings(t, cfg, ndjson(recs))
	waitFindings(t, s, want)

	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	remote := []string{"--api-url", "http://" + s.apiAddr}
	local := []string{"--data-dir", dir}
	for _, where := range [][]string{remote, local} {
		var page audit.FindingPage
		if err := json.Unmarshal([]byte(cli(append([]string{"findings", "--format", "json", "--limit", "500"}, where...)...)), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Findings) != len(want) {
			t.Errorf("%v: %d findings, want %d", where, len(page.Findings), len(want))
		}
		text := cli(append([]string{"findings", "--kind", "double_applied_write"}, where...)...)
		if strings.Count(text, "double_applied_write") != 3 {
			t.Errorf("%v: text findings:\n%s", where, text)
		}
		tl := cli(append([]string{"timeline", "ops/notes-1d0459.gram"}, where...)...)
		if !strings.Contains(tl, "Timeline of ops/notes-1d0459.gram (7 events)") || !strings.Contains(tl, "double_applied_write") {
			t.Errorf("%v: timeline:\n%s", where, tl)
		}
		slo := cli(append([]string{"slo", "--window", "3650d"}, where...)...)
		if !strings.Contains(slo, "SLI: 0.") || !strings.Contains(slo, "double_applied") {
			t.Errorf("%v: slo:\n%s", where, slo)
		}
	}
}

// TestTimelineDotDocuments: the documents "." and ".." are asked for as
// themselves, not as the path's dot segments.
func TestTimelineDotDocuments(t *testing.T) {
	var got []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.RequestURI)
		io.WriteString(w, `{"document":"x","events":[]}`)
	}))
	defer hs.Close()
	for doc, want := range map[string]string{"..": "/api/v1/documents/%2E%2E/timeline", ".": "/api/v1/documents/%2E/timeline",
		"a/../b": "/api/v1/documents/a%2F..%2Fb/timeline"} {
		got = nil
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"timeline", "--api-url", hs.URL, doc}, nil, &out, &errb); code != 0 || len(got) != 1 || got[0] != want {
			t.Errorf("timeline %q: exit %d %s, asked %v, want %s", doc, code, errb.String(), got, want)
		}
	}
}
