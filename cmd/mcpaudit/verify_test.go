package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// TestVerifyCommand: keygen, serve with the private key, traffic, then
// mcpaudit verify with the public key: 0 on the untouched data dir, 1 with
// the place of a deleted call, 2 without a data dir.
func TestVerifyCommand(t *testing.T) {
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "signing.pem"), filepath.Join(keys, "verify.pem")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--private-key", priv, "--public-key", pub}, nil, &out, &errb); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errb.String())
	}
	if code := run(context.Background(), []string{"keygen", "--private-key", priv, "--public-key", pub}, nil, &out, &errb); code != 2 {
		t.Fatalf("keygen over existing files: exit %d, want 2", code)
	}
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.Serve.SigningKeyFile = priv
	s := startTest(t, cfg)
	resp := postCalls(t, s, ndjson(mergedCapture(t)), false)
	resp.Body.Close()
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify := func() (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"verify", "--data-dir", dir, "--public-key", pub}, nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "ok: stored history matches") {
		t.Fatalf("verify of an untouched data dir: exit %d:\n%s", code, out)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "mcpaudit.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM calls WHERE rid = 5`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if code, out := verify(); code != 1 || !strings.Contains(out, "TAMPERED") || !strings.Contains(out, "row [5] gone") {
		t.Fatalf("verify after deleting call row 5: exit %d:\n%s", code, out)
	}
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"verify", "--data-dir", t.TempDir()}, nil, &out, &errOut); code != 2 {
		t.Fatalf("verify of an empty dir: exit %d, want 2", code)
	}
}
