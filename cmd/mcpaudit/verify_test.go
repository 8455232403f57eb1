package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
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
	// The calls in the table, which the chain covers: a row deleted from
	// it is what verify must find (the call logs, the default since
	// dflt51 for a new data dir, are not chained yet).
	cfg := autoConfig(t, dir, sqlite.CallsSQLite)
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

// TestVerifyCommand_ClickHouse: serve into ClickHouse with a signing key,
// then mcpaudit verify --store clickhouse: 0 on the untouched database, 1
// naming a deleted call, 2 without a DSN.
func TestVerifyCommand_ClickHouse(t *testing.T) {
	dsn := clickhouseDSN(t)
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "signing.pem"), filepath.Join(keys, "verify.pem")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"keygen", "--private-key", priv, "--public-key", pub}, nil, &out, &errb); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errb.String())
	}
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Store = "clickhouse"
	cfg.Serve.SigningKeyFile = priv
	cfg.Serve.ClickHouse.DSN = dsn
	db := fmt.Sprintf("mcpaudit_verify_%d", time.Now().UnixNano())
	cfg.Serve.ClickHouse.Database = db
	cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	// Acknowledged on insert: with "log", what serve left in its spool at
	// shutdown would reach ClickHouse only at its next start.
	cfg.Serve.ClickHouse.Ack = "insert"
	s := startTest(t, cfg)
	conn := chConn(t, dsn)
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })
	resp := postCalls(t, s, ndjson(mergedCapture(t)), false)
	resp.Body.Close()
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"verify"}, args...), nil, &out, &errb)
		return code, out.String() + errb.String()
	}
	args := []string{"--store", "clickhouse", "--clickhouse-dsn", dsn, "--clickhouse-database", db, "--public-key", pub}
	if code, out := verify(args...); code != 0 || !strings.Contains(out, "ok: stored history matches") || strings.Contains(out, " 0 calls") {
		t.Fatalf("verify of an untouched database: exit %d:\n%s", code, out)
	}
	var id string
	var at time.Time
	if err := conn.QueryRow(context.Background(), "SELECT id, time FROM "+db+".calls ORDER BY id LIMIT 1 OFFSET 7").Scan(&id, &at); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(context.Background(), "ALTER TABLE "+db+".calls DELETE WHERE id = '"+id+"'"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var n uint64
		if err := conn.QueryRow(context.Background(), "SELECT count() FROM system.mutations WHERE NOT is_done AND database = '"+db+"'").Scan(&n); err != nil || n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the delete did not finish")
		}
	}
	if code, out := verify(args...); code != 1 || !strings.Contains(out, "TAMPERED") || !strings.Contains(out, "deleted: calls of time "+at.UTC().Format(time.RFC3339)) {
		t.Fatalf("verify after deleting call %s: exit %d:\n%s", id, code, out)
	}
	if code, out := verify("--store", "clickhouse"); code != 2 {
		t.Fatalf("verify without a DSN: exit %d, want 2:\n%s", code, out)
	}
}

// chConn is a plain ClickHouse connection for changes made around serve.
func chConn(t *testing.T, dsn string) driver.Conn {
	t.Helper()
	opts, err := ch.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	opts.Settings = ch.Settings{"allow_experimental_low_cardinality_type": 1}
	conn, err := ch.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// answerCompleting returns one exchange of a minute ago as two call
// records: without its answer (a client observer that timed out), then
// with it (the server's), which completes the stored call.
func answerCompleting() []string {
	at := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
	const request = `"request":{"id":1,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"team/x.gram","base_revision":3,"expected_hash":"aa","request_id":"req-1","operations":[{"op":"append_block","target":"h1","text":"x"}]}}}`
	return []string{
		fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s0",%s}`, at, request),
		fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s0",%s,"response":{"id":1,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"team/x.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-1"}}}}`, at, request),
	}
}

// TestVerifyCommand_AnswerCompletes: serve with a signing key takes one
// exchange twice, first without its answer and then with it (a client
// observer that timed out, then the server's); the store keeps the answer
// in the unanswered row's place, and mcpaudit verify passes on the data dir.
func TestVerifyCommand_AnswerCompletes(t *testing.T) {
	priv, pub := keyPair(t)
	dir := t.TempDir()
	// The answer replaces the call's row in the table and records the
	// row replaced (in the call logs an answer goes to calls_completed).
	cfg := autoConfig(t, dir, sqlite.CallsSQLite)
	cfg.Serve.SigningKeyFile = priv
	s := startTest(t, cfg)
	for _, line := range answerCompleting() {
		resp := postCalls(t, s, []byte(line+"\n"), false)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /v1/calls: %s", resp.Status)
		}
	}
	if err := s.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "mcpaudit.db"))
	if err != nil {
		t.Fatal(err)
	}
	var calls, replaced int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM chain_pruned WHERE typeof(row) = 'integer')`).Scan(&calls, &replaced); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if calls != 1 || replaced != 1 {
		t.Fatalf("the store holds %d calls and %d replaced rows, want 1 and 1 (the answer in the unanswered row's place)", calls, replaced)
	}
	var vout, verr bytes.Buffer
	if code := run(context.Background(), []string{"verify", "--data-dir", dir, "--public-key", pub}, nil, &vout, &verr); code != 0 || !strings.Contains(vout.String(), "ok: stored history matches") {
		t.Fatalf("verify: exit %d:\n%s%s", code, vout.String(), verr.String())
	}
}
