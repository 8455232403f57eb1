package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestBackupRestore: a backup taken while serve runs, restored into the
// data dir after its store file was lost, gives back what serve had: every
// call, and the findings analyze finds in them (judged again at the start,
// the state file having been moved aside with the files replaced). Restore
// refuses a running collector and a file that is not a store, and moves
// what it replaces aside instead of deleting it.
func TestBackupRestore(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	body := ndjson(mergedCapture(t))
	want := analyzeFindings(t, cfg, body)
	s, calls := serveCapture(t, cfg, body, want)

	cli := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	out := filepath.Join(t.TempDir(), "backup.db")
	if code, msg := cli("backup", "--data-dir", dir, "--out", out); code != 0 || !strings.Contains(msg, "wrote "+out) {
		t.Fatalf("backup while serve runs: exit %d: %s", code, msg)
	}
	if code, msg := cli("backup", "--data-dir", dir, "--out", out); code != 1 || !strings.Contains(msg, "exists") {
		t.Errorf("a second backup to the same file: exit %d: %s", code, msg)
	}
	if code, msg := cli("restore", "--data-dir", dir, "--from", out); code != 1 || !strings.Contains(msg, "in use") {
		t.Errorf("restore while serve runs: exit %d: %s", code, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The disk loses the store file.
	if err := os.Remove(filepath.Join(dir, storeFile)); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(t.TempDir(), "junk.db")
	os.WriteFile(junk, []byte("not a store"), 0o600)
	if code, msg := cli("restore", "--data-dir", dir, "--from", junk); code != 1 || !strings.Contains(msg, "not restored") {
		t.Errorf("restore from a text file: exit %d: %s", code, msg)
	}
	if _, err := os.Stat(filepath.Join(dir, "partitions.json")); err != nil {
		t.Errorf("a refused restore moved the state file: %v", err)
	}
	code, msg := cli("restore", "--data-dir", dir, "--from", out)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, msg)
	}
	t.Log(msg)
	aside, _ := filepath.Glob(filepath.Join(dir, "before-restore-*", "partitions.json"))
	if len(aside) != 1 {
		t.Errorf("the state file was not moved aside: %s", msg)
	}

	// Into a new data dir, restore says the masking key is missing.
	if code, msg := cli("restore", "--data-dir", t.TempDir(), "--from", out); code != 0 || !strings.Contains(msg, "no redact.key") {
		t.Errorf("restore into a new data dir: exit %d: %s", code, msg)
	}

	s = startTest(t, testConfig(t, dir))
	waitFindings(t, s, want)
	if got := apiCalls(t, s); !slices.Equal(got, calls) {
		t.Errorf("the restored store's calls (%d) differ from those serve had (%d)", len(got), len(calls))
	}
}

// serveCapture starts serve with cfg, posts body and waits for its
// findings (want), and returns serve with every stored call (apiCalls).
func serveCapture(t *testing.T, cfg Config, body []byte, want []audit.Finding) (*server, []string) {
	t.Helper()
	s := startTest(t, cfg)
	resp := postCalls(t, s, body, false)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("post: %s", resp.Status)
	}
	waitFindings(t, s, want)
	return s, apiCalls(t, s)
}

// apiCalls returns every stored call as the API gives it, page by page.
func apiCalls(t *testing.T, s *server) []string {
	t.Helper()
	var out []string
	for cursor := ""; ; {
		var page struct {
			Calls      []json.RawMessage `json:"calls"`
			NextCursor string            `json:"next_cursor"`
		}
		getJSON(t, "http://"+s.apiAddr+"/api/v1/calls?limit=1000&cursor="+url.QueryEscape(cursor), &page)
		for _, c := range page.Calls {
			out = append(out, string(c))
		}
		if cursor = page.NextCursor; cursor == "" {
			return out
		}
	}
}
