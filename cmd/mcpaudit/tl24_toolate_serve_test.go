package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestServe_TooLateStoredAndPassedOverAtRestart (tl24; live23's finding:
// serve on ClickHouse showed too_late=1 in the status while the store's
// too_late table was empty). Through a real serve, stopped and started
// again on the same data directory: a call dated 20 s behind its
// partition's watermark (allowed_lateness 2 s) is counted too late; the
// embedded store (a real SQLite file) keeps it in too_late, and the
// restart, whose replay reaches back over it, passes over it
// (too_late_calls_skipped=1) and counts it as stored too late before the
// start.
//
// On ClickHouse (real server; ack log and ack insert) serve names none, as
// docs/clickhouse.md and docs/detection.md ("Late calls") say: the store
// cannot tell a new call from a copy it held (it never reads before it
// inserts), and naming a copy would have the replay pass over the first
// observation, judged in time (review rev15a). So its too_late table stays
// empty and the restart judges the call again. That is what live23 saw,
// not a lost row. The cases pin it so that a store that learns to tell
// changes them together with those docs. (Named directly, the rows did get
// lost on their way: TestStore_TooLateOfKeptBatch in exporter/clickhouse.)
func TestServe_TooLateStoredAndPassedOverAtRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store string // "" embedded; "log" or "insert": ClickHouse with that ack
	}{
		{name: "embedded"},
		{name: "clickhouse_ack_log", store: "log"},
		{name: "clickhouse_ack_insert", store: "insert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := "detect:\n  idle_timeout: 1s\n  lateness: 1s\n  allowed_lateness: 2s\n  max_clock_skew: 1s\n  verify_window: 2s\n" +
				"  correlation_window: 1m\n  join_wait: 1s\nserve:\n  pipeline:\n    commit_every: 50ms\n"
			var db, dsn string
			if tc.store != "" {
				dsn = clickhouseDSN(t)
				db = fmt.Sprintf("mcpaudit_tl24_%d", time.Now().UnixNano())
				conn := chConn(t, dsn)
				t.Cleanup(func() { conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })
				yaml += fmt.Sprintf("  store: clickhouse\n  clickhouse:\n    dsn: %s\n    database: %s\n    ack: %s\n    batch_age: 20ms\n", dsn, db, tc.store)
			}
			config := filepath.Join(t.TempDir(), "mcpaudit.yaml")
			if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			dataDir := t.TempDir()
			start := func() (apiAddr, ingest string, log *lockedBuffer, stop func()) {
				apiAddr, ingest = freePort(t), freePort(t)
				ctx, cancel := context.WithCancel(context.Background())
				log = &lockedBuffer{}
				served := make(chan error, 1)
				go func() {
					served <- serveCommand(ctx, []string{"--config", config, "--data-dir", dataDir, "--api-listen", apiAddr,
						"--ingest-listen", ingest, "--grpc-listen", ""}, log)
				}()
				stop = func() {
					cancel()
					if err := <-served; err != nil {
						t.Errorf("serve: %v\n%s", err, log.String())
					}
				}
				for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					if resp, err := http.Get("http://" + apiAddr + "/readyz"); err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							return apiAddr, ingest, log, stop
						}
					}
					select {
					case err := <-served:
						t.Fatalf("serve stopped: %v\n%s", err, log.String())
					default:
					}
					if time.Now().After(deadline) {
						cancel()
						t.Fatalf("serve not ready:\n%s", log.String())
					}
				}
			}
			status := func(apiAddr string) api.StatusResponse {
				var st api.StatusResponse
				getJSON(t, "http://"+apiAddr+"/api/v1/status", &st)
				return st
			}
			post := func(ingest string, at time.Time, id int) {
				t.Helper()
				line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"jsonrpc":"2.0","id":%d,"result":{}}}`+"\n",
					at.UTC().Format(time.RFC3339Nano), id, id)
				req, _ := http.NewRequest("POST", "http://"+ingest+"/v1/calls", strings.NewReader(line))
				req.Header.Set("Content-Type", "application/x-ndjson")
				req.Header.Set("Mcpaudit-Source", "relay-a")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					t.Fatalf("POST /v1/calls: %s %s", resp.Status, b)
				}
			}

			apiAddr, ingest, _, stop := start()
			now := time.Now()
			post(ingest, now, 1)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if st := status(apiAddr); st.Judged && len(st.Partitions) > 0 && st.Partitions[0].Watermark != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the first call never judged: %+v", status(apiAddr))
				}
			}
			// 20 s behind: past allowed_lateness (2 s), within the replay's
			// reach (correlation_window 1m + verify_window + lateness bounds).
			post(ingest, now.Add(-20*time.Second), 2)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if st := status(apiAddr); st.TooLate == 1 && st.Unstored == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the call dated 20 s back was not counted and stored too late: %+v", status(apiAddr))
				}
			}
			stop()

			apiAddr, _, log, stop := start()
			defer stop()
			m := regexp.MustCompile(`"correlation state rebuilt from the store".*"replayed_calls":(\d+).*"too_late_calls_skipped":(\d+)`).FindStringSubmatch(log.String())
			if m == nil {
				t.Fatalf("no replay line in the restart's log:\n%s", log.String())
			}
			replayed, skipped := m[1], m[2]
			st := status(apiAddr)
			want := struct{ replayed, skipped string }{"1", "1"}
			wantBefore := int64(1)
			if tc.store != "" {
				// Not named (docs/clickhouse.md, too_late): judged again.
				want, wantBefore = struct{ replayed, skipped string }{"2", "0"}, 0
				var n uint64
				if err := chConn(t, dsn).QueryRow(context.Background(), "SELECT count() FROM "+db+".too_late").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n != 0 {
					t.Errorf("ClickHouse's too_late holds %d rows; serve names none on this store (docs/clickhouse.md): change this test with the docs", n)
				}
			}
			if replayed != want.replayed || skipped != want.skipped {
				t.Errorf("the restart's replay took %s calls and passed over %s as too late; want %s and %s", replayed, skipped, want.replayed, want.skipped)
			}
			if st.TooLate != 0 || st.TooLateBeforeStart != wantBefore {
				t.Errorf("after the restart the status counts %d too late since the start and %d before it; want 0 and %d", st.TooLate, st.TooLateBeforeStart, wantBefore)
			}
		})
	}
}
