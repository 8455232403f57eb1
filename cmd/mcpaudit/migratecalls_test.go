package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
)

// TestMigrateCalls_ServeWritten: a data dir written by serve with calls:
// sqlite and a signing key (calls, writes, findings, a finding
// acknowledged, an answer completing its call) is moved by mcpaudit
// migrate-calls: verify passes after it (the deleted rows are recorded as
// retention's are), serve with calls: auto then keeps the calls in the
// logs and gives every call once, the same findings and the acknowledged
// state, verify passes again after its signed checkpoint, and a second
// run moves nothing. On main migrate-calls is an unknown command (exit 2).
func TestMigrateCalls_ServeWritten(t *testing.T) {
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "signing.pem"), filepath.Join(keys, "verify.pem")
	if code, _, errs := cliRun("keygen", "--private-key", priv, "--public-key", pub); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errs)
	}
	dir := t.TempDir()
	cfg := autoConfig(t, dir, sqlite.CallsSQLite)
	cfg.Serve.SigningKeyFile = priv
	body := ndjson(mergedCapture(t))
	want := analyzeFindings(t, cfg, body)
	s, _ := serveCapture(t, cfg, body, want)
	// An exchange first without its answer, then with it: the answer
	// replaces the row.
	for _, line := range answerCompleting() {
		postAs(t, s.ingestAddr, "answers", []byte(line+"\n"))
	}
	if code, out, errs := cliRun("findings", "ack", "--api-url", "http://"+s.apiAddr, want[0].ID(), "--note", "seen"); code != 0 {
		t.Fatalf("findings ack: exit %d: %s%s", code, out, errs)
	}
	stopServe(t, s)
	// Every call as export gives it (the record whole), once serve has
	// stopped: the answer completes its call after its POST is answered.
	exported := func(when string) []string {
		t.Helper()
		code, out, errs := cliRun("export", "--data-dir", dir)
		if code != 0 {
			t.Fatalf("export %s: exit %d: %s", when, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(lines)
		return lines
	}
	calls := exported("before migrate-calls")
	if !strings.Contains(strings.Join(calls, "\n"), `"rev":4`) {
		t.Fatal("the answer did not complete its call before migrate-calls")
	}
	n, _, err := sqlite.Count(context.Background(), filepath.Join(dir, storeFile))
	if err != nil || int(n) != len(calls) {
		t.Fatalf("the calls table holds %d calls (%v), the API gave %d", n, err, len(calls))
	}
	verify := func(when string) {
		t.Helper()
		code, out, errs := cliRun("verify", "--data-dir", dir, "--public-key", pub)
		if code != 0 || strings.Contains(out, "TAMPERED") {
			t.Fatalf("verify %s: exit %d:\n%s%s", when, code, out, errs)
		}
	}
	verify("before migrate-calls")

	code, out, errs := cliRun("migrate-calls", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("moved %d calls", len(calls))) {
		t.Fatalf("migrate-calls: exit %d: %s%s", code, out, errs)
	}
	if n, _, _ := sqlite.Count(context.Background(), filepath.Join(dir, storeFile)); n != 0 || !calllogs.InUse(dir) {
		t.Fatalf("after migrate-calls the table holds %d calls, logs in use %v", n, calllogs.InUse(dir))
	}
	verify("after migrate-calls")
	_, vout, _ := cliRun("verify", "--data-dir", dir, "--public-key", pub)
	t.Logf("verify after migrate-calls, before serve signs:\n%s", vout)

	cfg.Serve.SQLite.Calls = sqlite.CallsAuto
	s, log := startLogged(t, cfg)
	choseCalls(t, log, sqlite.CallsLog, "the call logs hold calls")
	if got := apiCalls(t, s); len(got) != len(calls) {
		t.Errorf("after migrate-calls serve gives %d calls, want %d", len(got), len(calls))
	}
	if got := exported("after migrate-calls"); !slices.Equal(got, calls) {
		t.Errorf("after migrate-calls export gives %d calls, want the %d before, each once and the same", len(got), len(calls))
		for i := range min(len(got), len(calls)) {
			if got[i] != calls[i] {
				t.Errorf("first difference:\n got %s\nwant %s", got[i], calls[i])
				break
			}
		}
	}
	if fs := apiFindings(t, s, ""); len(fs) < len(want) {
		t.Errorf("after migrate-calls: %d findings, want %d", len(fs), len(want))
	}
	if code, out, errs := cliRun("findings", "--api-url", "http://"+s.apiAddr, "--format", "json", "--state", "acknowledged"); code != 0 || !strings.Contains(out, want[0].ID()) {
		t.Errorf("after migrate-calls, %s is not acknowledged: exit %d: %s%s", want[0].ID(), code, out, errs)
	}
	stopServe(t, s)
	verify("after serve's start on the logs")
	readersSee(t, dir, len(calls), want)

	code, out, errs = cliRun("migrate-calls", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "moved 0 calls") {
		t.Errorf("migrate-calls again: exit %d: %s%s", code, out, errs)
	}
}
