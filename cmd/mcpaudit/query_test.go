package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// TestTablesShowNoControlCharacters: a document name with escape sequences
// (it comes from a tool's arguments) is printed with them shown as '?', in
// analyze's table and in the findings and timeline of a running server.
func TestTablesShowNoControlCharacters(t *testing.T) {
	in, err := os.ReadFile("../../testdata/examples/thegram-both-succeeded-double-apply.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	evil := `ops/\u001b]0;PWNED\u0007\u001b[2J\u202e.gram`
	in = bytes.ReplaceAll(in, []byte("research/log-e29a17.gram"), []byte(evil))
	file := filepath.Join(t.TempDir(), "evil.ndjson")
	if err := os.WriteFile(file, in, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	run(context.Background(), []string{"analyze", "--fail-on", "never", file}, nil, &out, &errb)
	if !strings.Contains(out.String(), "ops/?]0;PWNED??[2J?.gram") || strings.ContainsAny(out.String(), "\x1b\x07\u202e") {
		t.Errorf("analyze printed:\n%q\nwant the document with its control characters shown as '?'", out.String())
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/timeline") {
			io.WriteString(w, `{"document":"`+evil+`","events":[{"time":"2026-11-02T09:00:00Z","type":"write","key":"k\u001b[31m","state":"durable"}]}`)
			return
		}
		io.WriteString(w, `{"findings":[{"kind":"double_applied_write","severity":"critical","server":"thegram","document":"`+evil+`","time":"2026-11-02T09:00:00Z","summary":"on `+evil+`"}],"next_cursor":""}`)
	}))
	defer hs.Close()
	for _, args := range [][]string{{"findings"}, {"timeline", "x"}} {
		out.Reset()
		if code := run(context.Background(), append(args, "--api-url", hs.URL), nil, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.Contains(out.String(), "ops/?]0;PWNED??[2J?.gram") || strings.ContainsAny(out.String(), "\x1b\x07\u202e") {
			t.Errorf("%v printed:\n%q\nwant control characters shown as '?'", args, out.String())
		}
	}
}
