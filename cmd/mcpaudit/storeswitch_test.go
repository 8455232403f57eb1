package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// stateOwner returns the store a state file names (its "store").
func stateOwner(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var f struct {
		Store string `json:"store"`
	}
	err = json.Unmarshal(b, &f)
	return f.Store, err
}

// TestServe_SwitchToClickHouse (op23's D3): serve stores the example
// captures in the embedded store, then starts on ClickHouse (a real
// server) with the same data dir. It says in a WARN and in the status that
// mcpaudit.db holds calls and findings ClickHouse does not; the embedded
// store's state file is moved aside, so that its partitions are not shown
// (nor held) on ClickHouse; back on the embedded store its state file is
// put back and its partitions return. On main the switch said nothing and
// the status showed the embedded store's partitions on ClickHouse.
func TestServe_SwitchToClickHouse(t *testing.T) {
	dsn := clickhouseDSN(t)
	dir := t.TempDir()
	emb := testConfig(t, dir)
	s := startTest(t, emb)
	resp := postCalls(t, s, ndjson(mergedCapture(t)), false)
	resp.Body.Close()
	stopServer(t, s)
	// The calls as the --data-dir readers read them: in the call logs of
	// a new data dir (serve.sqlite.calls: auto), where the table alone
	// held none of them and the WARN said calls=0.
	var calls, findings int64
	rd, err := openReading(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = rd.ScanCalls(context.Background(), time.Time{}, func(*audit.Record) error { calls++; return nil })
	rd.Close()
	if err != nil || calls == 0 {
		t.Fatalf("the embedded store holds %d calls (%v)", calls, err)
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, storeFile))
	if err != nil {
		t.Fatal(err)
	}
	err = db.QueryRow(`SELECT count(*) FROM findings`).Scan(&findings)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	var before api.StatusResponse
	{
		s := startTest(t, emb)
		getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &before)
		stopServer(t, s)
	}
	if len(before.Partitions) == 0 {
		t.Fatal("the embedded store's status shows no partition")
	}

	chCfg := testConfig(t, dir)
	chCfg.Serve.Store = "clickhouse"
	chCfg.Serve.ClickHouse.DSN = dsn
	chCfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_switch_%d", time.Now().UnixNano())
	chCfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := chCfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	s = startLogging(t, chCfg, &logs)
	// other_store is read beside the response, so that the test also
	// runs on a release before it (op23a shows it fails there).
	var st struct {
		api.StatusResponse
		Other *struct {
			Store           string
			Calls, Findings int64
		} `json:"other_store"`
	}
	getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
	var raw api.StatusResponse
	getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &raw)
	var text bytes.Buffer
	printStatus(&text, raw, false)
	stopServer(t, s)
	warn := fmt.Sprintf("calls=%d findings=%d", calls, findings)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "the data dir holds an embedded store") || !strings.Contains(logs.String(), warn) {
		t.Errorf("serve on ClickHouse over a data dir with an embedded store of %d calls: no WARN with %q:\n%s", calls, warn, logs.String())
	}
	if o := st.Other; o == nil || o.Calls != calls || o.Findings != findings || o.Store != "sqlite" {
		t.Errorf("status other_store %+v, want the embedded store's %d calls and %d findings", o, calls, findings)
	}
	if want := fmt.Sprintf("with %d calls and %d findings that this store does not hold", calls, findings); !strings.Contains(text.String(), want) {
		t.Errorf("mcpaudit status does not say %q:\n%s", want, text.String())
	}
	if len(st.Partitions) != 0 {
		t.Errorf("status on an empty ClickHouse store shows %d partitions of the embedded store's state file: %+v", len(st.Partitions), st.Partitions[0])
	}
	if !strings.Contains(logs.String(), "the state file was written for another store") {
		t.Errorf("no WARN that the embedded store's state file is not carried over:\n%s", logs.String())
	}
	if owner, err := stateOwner(filepath.Join(dir, stateFile)); err != nil || owner != "clickhouse:"+chCfg.Serve.ClickHouse.Database {
		t.Errorf("partitions.json is the state file of %q (%v), want ClickHouse's", owner, err)
	}
	if owner, err := stateOwner(filepath.Join(dir, "partitions.sqlite.json")); err != nil || owner != "sqlite" {
		t.Errorf("partitions.sqlite.json is the state file of %q (%v), want the embedded store's, kept aside", owner, err)
	}

	logs = lockedBuffer{}
	s = startLogging(t, emb, &logs)
	var back api.StatusResponse
	getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &back)
	stopServer(t, s)
	if len(back.Partitions) != len(before.Partitions) {
		t.Errorf("back on the embedded store: %d partitions, want its %d again", len(back.Partitions), len(before.Partitions))
	}
	if !strings.Contains(logs.String(), "is back") {
		t.Errorf("back on the embedded store: no WARN that its state file is back:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "partitions.clickhouse-"+chCfg.Serve.ClickHouse.Database+".json")); err != nil {
		t.Errorf("ClickHouse's state file is not kept aside: %v", err)
	}
}

// TestSwitchStateFile: which state file a start takes, by the store it
// names; a file of a release before the name is the embedded store's when
// serve starts on ClickHouse beside an embedded store that holds calls.
func TestSwitchStateFile(t *testing.T) {
	f := func(name string, files map[string]string, id string, embeddedCalls int64, want map[string]string) {
		t.Helper()
		dir := t.TempDir()
		for n, owner := range files {
			os.WriteFile(filepath.Join(dir, n), []byte(`{"version":2,"store":"`+owner+`","partitions":[]}`), 0o600)
		}
		var logs lockedBuffer
		if err := switchStateFile(dir, id, embeddedCalls, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := map[string]string{}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			got[e.Name()], _ = stateOwner(filepath.Join(dir, e.Name()))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: files %v, want %v (log %s)", name, got, want, logs.String())
		}
	}
	f("same store", map[string]string{"partitions.json": "sqlite"}, "sqlite", 5, map[string]string{"partitions.json": "sqlite"})
	f("to clickhouse", map[string]string{"partitions.json": "sqlite"}, "clickhouse:m", 5,
		map[string]string{"partitions.sqlite.json": "sqlite"})
	f("back to sqlite", map[string]string{"partitions.json": "clickhouse:m", "partitions.sqlite.json": "sqlite"}, "sqlite", 0,
		map[string]string{"partitions.json": "sqlite", "partitions.clickhouse-m.json": "clickhouse:m"})
	f("another database", map[string]string{"partitions.json": "clickhouse:a"}, "clickhouse:b", 0,
		map[string]string{"partitions.clickhouse-a.json": "clickhouse:a"})
	f("unnamed, beside an embedded store with calls", map[string]string{"partitions.json": ""}, "clickhouse:m", 5,
		map[string]string{"partitions.sqlite.json": ""})
	f("unnamed, no embedded calls", map[string]string{"partitions.json": ""}, "clickhouse:m", 0,
		map[string]string{"partitions.json": ""})
	f("unnamed, on the embedded store", map[string]string{"partitions.json": ""}, "sqlite", 5,
		map[string]string{"partitions.json": ""})
	f("none", nil, "clickhouse:m", 5, map[string]string{})
}

// TestSwitchStateFile_CountLog (cnt50): the journal of a state file's
// counters (pipeline.CountLogNames) goes with it when a switch of
// serve.store moves it aside, and comes back with it: the state file put
// back names the journal by its own name, partitions.counts.a or .b.
func TestSwitchStateFile_CountLog(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"partitions.json":            `{"version":2,"store":"clickhouse:m","partitions":[]}`,
		"partitions.counts.a":        "clickhouse's journal",
		"partitions.sqlite.json":     `{"version":2,"store":"sqlite","partitions":[]}`,
		"partitions.sqlite.counts.b": "the embedded store's journal",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := switchStateFile(dir, "sqlite", 0, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"partitions.counts.b":              "the embedded store's journal",
		"partitions.clickhouse-m.counts.a": "clickhouse's journal",
	} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
	for _, gone := range []string{"partitions.counts.a", "partitions.sqlite.counts.b"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s is still there", gone)
		}
	}
}
