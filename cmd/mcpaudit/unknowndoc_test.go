package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestQuery_UnknownDocumentHint: a timeline or a document-filtered
// findings list that comes back empty says on stderr, as the page's 404
// does, that no stored call names the document and that names match
// exactly, and exits 0 as before (the API answers 200, docs/api.md). A
// known document with nothing to list (no findings, or no event in the
// range) says nothing. Through a running API and a data dir, both over a
// real store.
func TestQuery_UnknownDocumentHint(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, storeFile), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	line := `{"time":"2026-12-04T18:00:00Z","server":"thegram","session":"s1","request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"ops/Notes.gram"}}},"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false}}}`
	dec, err := capture.NewDecoder(strings.NewReader(line+"\n"), "line")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := dec.NextRecord(dialect.NewReader(dialect.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	if docs := rec.Documents(); len(docs) != 1 || docs[0] != "ops/Notes.gram" {
		t.Fatalf("the call names %v, want ops/Notes.gram", docs)
	}
	if _, err := st.AppendCalls(context.Background(), []audit.Record{*rec}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.New(st, 0.999).Handler())
	t.Cleanup(hs.Close)
	// The data dir is read while the server holds the store open, as it
	// is beside a running serve.
	t.Cleanup(func() { st.Close() })

	const hint = "names match exactly"
	for _, where := range [][]string{{"--api-url", hs.URL}, {"--data-dir", dir}} {
		for _, tc := range []struct {
			args []string
			hint bool
		}{
			{[]string{"timeline", "ops/notes.gram"}, true},
			{[]string{"timeline", "Notes.gram", "--format", "json"}, true},
			{[]string{"findings", "--document", "ops\\Notes.gram"}, true},
			{[]string{"timeline", "ops/Notes.gram"}, false},
			{[]string{"timeline", "ops/Notes.gram", "--since", "2026-12-04T18:30:00Z"}, false},
			{[]string{"findings", "--document", "ops/Notes.gram"}, false},
			{[]string{"findings"}, false},
		} {
			args := append(append([]string{}, tc.args...), where...)
			var out, errb bytes.Buffer
			code := run(context.Background(), args, nil, &out, &errb)
			if code != 0 {
				t.Errorf("%v: exit %d, want 0: %s", args, code, errb.String())
			}
			if got := strings.Contains(errb.String(), hint); got != tc.hint {
				t.Errorf("%v: hint on stderr %v, want %v: %q", args, got, tc.hint, errb.String())
			}
			if tc.hint && !strings.Contains(errb.String(), "no stored call names document") {
				t.Errorf("%v: stderr does not say no stored call names the document: %q", args, errb.String())
			}
			if strings.Contains(out.String(), hint) {
				t.Errorf("%v: the hint went to stdout", args)
			}
		}
	}
}
