package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestVerifyCommand_KeyRotation (op23's D1): serve signs with one key,
// the key is rotated (keygen, serve.signing_key_file, restart) and serve
// signs on with the new one. verify given both public keys, as two
// --public-key flags or as one file holding both, passes and says which
// key signed which checkpoints; given the new key alone, or a key that
// signed nothing, the old checkpoints are TAMPERED, naming the key they
// were signed with; a start back on the retired key is TAMPERED. On main
// a second --public-key replaced the first, so no history signed by two
// keys could pass.
func TestVerifyCommand_KeyRotation(t *testing.T) {
	dir := t.TempDir()
	// The calls in the table: the chain covers them, and each start's
	// call moves the heads that the new key signs (in call logs, the
	// default since dflt51 for a new data dir, the chain holds nothing
	// and no checkpoint is signed by the second key).
	testKeyRotation(t, func(t *testing.T) Config { return autoConfig(t, dir, sqlite.CallsSQLite) }, "--data-dir", dir)
}

// TestVerifyCommand_KeyRotationClickHouse: the same on the ClickHouse
// store (a real server), whose checkpoints are per replica.
func TestVerifyCommand_KeyRotationClickHouse(t *testing.T) {
	dsn := clickhouseDSN(t)
	db := fmt.Sprintf("mcpaudit_rotation_%d", time.Now().UnixNano())
	dir := t.TempDir()
	testKeyRotation(t, func(t *testing.T) Config {
		cfg := testConfig(t, dir)
		cfg.Serve.Store = "clickhouse"
		cfg.Serve.ClickHouse.DSN = dsn
		cfg.Serve.ClickHouse.Database = db
		cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
		return cfg
	}, "--store", "clickhouse", "--clickhouse-dsn", dsn, "--clickhouse-database", db)
}

// testKeyRotation runs serve (newConfig) with a first signing key, then
// with a second, and verifies (where: the store's verify flags).
func testKeyRotation(t *testing.T, newConfig func(t *testing.T) Config, where ...string) {
	keys := t.TempDir()
	keygen := func(name string) (priv, pub, id string) {
		t.Helper()
		priv, pub = filepath.Join(keys, name+".pem"), filepath.Join(keys, name+".pub.pem")
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"keygen", "--private-key", priv, "--public-key", pub}, nil, &out, &errb); code != 0 {
			t.Fatalf("keygen: exit %d: %s", code, errb.String())
		}
		id = regexp.MustCompile(`ed25519:[0-9a-f]{16}`).FindString(out.String())
		if id == "" {
			t.Errorf("keygen does not print the key id: %s", out.String())
		}
		return priv, pub, id
	}
	priv1, pub1, id1 := keygen("k1")
	priv2, pub2, id2 := keygen("k2")
	_, pub3, id3 := keygen("k3")
	// serve runs with priv, stores one call of its own and stops.
	serveWith := func(priv string, n int) {
		t.Helper()
		cfg := newConfig(t)
		cfg.Serve.SigningKeyFile = priv
		s := startTest(t, cfg)
		at := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
		line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s%d","request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"team/x%d.gram"}}},"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false}}}`, at, n, n)
		resp := postCalls(t, s, []byte(line+"\n"), false)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /v1/calls: %s", resp.Status)
		}
		if err := s.shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	verify := func(args ...string) (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(context.Background(), append(append([]string{"verify"}, where...), args...), nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	serveWith(priv1, 1)
	serveWith(priv2, 2)

	t.Run("both_keys", func(t *testing.T) {
		code, out := verify("--public-key", pub1, "--public-key", pub2)
		if code != 0 || !strings.Contains(out, "ok: stored history matches") {
			t.Fatalf("verify with the old and the new public key: exit %d, want 0:\n%s", code, out)
		}
		t.Logf("verify with both keys:\n%s", out)
		for _, id := range []string{id1, id2} {
			if !regexp.MustCompile(`note: key ` + id + ` \(.*\) signed checkpoints? \d`).MatchString(out) {
				t.Errorf("the report does not say which checkpoints key %s signed:\n%s", id, out)
			}
		}
	})
	t.Run("one_file_with_both", func(t *testing.T) {
		a, _ := os.ReadFile(pub1)
		b, _ := os.ReadFile(pub2)
		both := filepath.Join(keys, "both.pem")
		if err := os.WriteFile(both, append(a, b...), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out := verify("--public-key", both); code != 0 {
			t.Fatalf("verify with a file of both public keys: exit %d, want 0:\n%s", code, out)
		}
	})
	t.Run("new_key_alone", func(t *testing.T) {
		code, out := verify("--public-key", pub2)
		if code != 1 || !regexp.MustCompile(`TAMPERED: every tenant: checkpoint 1( of replica "[^"]*")?: `).MatchString(out) || !strings.Contains(out, "it names key "+id1+" as its signer") {
			t.Fatalf("verify with the new key alone: exit %d, want 1 naming the old key on checkpoint 1:\n%s", code, out)
		}
	})
	t.Run("key_not_given", func(t *testing.T) {
		// A checkpoint signed by a key not among those given still fails:
		// the point of signing.
		code, out := verify("--public-key", pub1, "--public-key", pub3)
		if code != 1 || !strings.Contains(out, "it names key "+id2+" as its signer") || !strings.Contains(out, "key "+id3) {
			t.Fatalf("verify with the old key and an unrelated one: exit %d, want 1 naming key %s:\n%s", code, id2, out)
		}
		// The entries the new key's checkpoints sign are not "not signed
		// yet" (out24's D4): a checkpoint that did not verify may sign them.
		if strings.Contains(out, "not signed yet") || !strings.Contains(out, "no checkpoint that the given keys verify signs") {
			t.Errorf("verify with the old key and an unrelated one calls the new key's entries not signed yet, or does not say what may sign them:\n%s", out)
		}
		t.Logf("verify with the old key and an unrelated one:\n%s", out)
	})
	t.Run("retired_key_back", func(t *testing.T) {
		serveWith(priv1, 3)
		code, out := verify("--public-key", pub1, "--public-key", pub2)
		if code != 1 || !strings.Contains(out, "a retired key signing after the rotation") {
			t.Fatalf("verify after a start back on the retired key: exit %d, want 1:\n%s", code, out)
		}
		t.Logf("verify after a start back on the retired key:\n%s", out)
	})
}

// TestRepeatedFlagRefused (op23's D1): a flag of verify or keygen that
// takes one value, given twice, is refused with its name instead of the
// last one winning silently; the repeatable --public-key of verify is not.
func TestRepeatedFlagRefused(t *testing.T) {
	f := func(want int, wantErr string, args ...string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(context.Background(), args, nil, &out, &errb)
		if code != want || !strings.Contains(errb.String(), wantErr) {
			t.Errorf("mcpaudit %s: exit %d, stderr %q; want exit %d with %q", strings.Join(args, " "), code, errb.String(), want, wantErr)
		}
	}
	empty := t.TempDir()
	f(2, "--data-dir is given 2 times", "verify", "--data-dir", empty, "--data-dir", t.TempDir())
	f(2, "--store is given 2 times", "verify", "--store", "sqlite", "--data-dir", empty, "--store=clickhouse")
	f(2, "--key-always is given 2 times", "verify", "--key-always", "--data-dir", empty, "-key-always")
	// --public-key twice is not refused as a repeat: the files are read
	// (and here missing).
	f(2, "cannot read key", "verify", "--data-dir", empty, "--public-key", "a.pem", "--public-key", "b.pem")
	f(2, "--public-key is given 2 times", "keygen", "--private-key", "a", "--public-key", "b", "--public-key", "c")
}
