package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServe_ClickHouseDownAtStopAndStart (live23's S1 and D1), with a real
// ClickHouse of the test's own:
//   - serve stops while ClickHouse is down, acknowledged calls in its
//     spool: the log's last line says how many batches are left there, at
//     WARN, instead of "stopped cleanly" (an operator reading "cleanly"
//     could delete the directory);
//   - serve starts again with ClickHouse still down and those batches in
//     the spool, and ClickHouse comes back: once the store is ready the
//     last finding gauge holds the newest finding of each server and kind
//     that the first run stored, and neither it nor the count of the calls
//     stored too late by earlier runs logs a failure. Before, both were
//     read once at Open, failed ("store unavailable: batches left in the
//     spool by an earlier run"), and were never read again: the gauge
//     stayed empty.
func TestServe_ClickHouseDownAtStopAndStart(t *testing.T) {
	t.Parallel() // a ClickHouse server of its own
	dsn, ctl := privateClickHouse(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Store = "clickhouse"
	cfg.Serve.ClickHouse.DSN = dsn
	cfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_lv23_%d", time.Now().UnixNano())
	cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	recs := mergedCapture(t)
	body := ndjson(recs)
	want := analyzeFindings(t, cfg, body)
	if len(want) == 0 {
		t.Fatal("the capture makes no finding: the test shows nothing")
	}
	// The newest finding of each server and kind: what the gauge holds.
	newest := map[string]time.Time{}
	for _, f := range want {
		k := fmt.Sprintf("kind=%q,server=%q", string(f.Kind), f.Server)
		if f.Time.After(newest[k]) {
			newest[k] = f.Time
		}
	}

	var log1 lockedBuffer
	s1, err := startServer(context.Background(), cfg, newJSONLogger(&log1, slog.LevelInfo))
	if err != nil {
		t.Fatal(err)
	}
	postAs(t, s1.ingestAddr, "test", body)
	waitFindings(t, s1, want)

	ctl("stop")
	// A call a day before the capture, in a session of its own (too late
	// to be judged), acknowledged into the spool while ClickHouse is down.
	late := map[string]any{}
	for k, v := range recs[0] {
		late[k] = v
	}
	tm, _ := time.Parse(time.RFC3339Nano, late["time"].(string))
	late["time"] = tm.Add(-24 * time.Hour).Format(time.RFC3339Nano)
	late["session"] = "s-late-lv23"
	postAs(t, s1.ingestAddr, "test", ndjson([]map[string]any{late}))
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s1.shutdown(sctx); err != nil {
		t.Fatalf("stop with ClickHouse down: %v\n%s", err, log1.String())
	}
	lines := strings.Split(strings.TrimSpace(log1.String()), "\n")
	var last struct {
		Level, Msg string
		Batches    int   `json:"spooled_batches"`
		Bytes      int64 `json:"spooled_bytes"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^stopped; (\d+) acknowledged batches \((\d+) bytes\) left in the spool, inserted at the next start$`).FindStringSubmatch(last.Msg)
	if last.Level != "WARN" || m == nil || m[1] != strconv.Itoa(last.Batches) || m[2] != strconv.FormatInt(last.Bytes, 10) || last.Batches == 0 || last.Bytes == 0 {
		t.Errorf("the last line of a stop with ClickHouse down and calls in the spool is\n%s\nwant WARN \"stopped; N acknowledged batches (B bytes) left in the spool, inserted at the next start\"", lines[len(lines)-1])
	}
	t.Logf("run 1 stopped: %s", lines[len(lines)-1])

	// Started with ClickHouse down and the batches in the spool: the start
	// waits for the store; ClickHouse comes back.
	var log2 lockedBuffer
	type started struct {
		s   *server
		err error
	}
	ch := make(chan started, 1)
	go func() {
		s, err := startServer(context.Background(), cfg, newJSONLogger(&log2, slog.LevelInfo))
		ch <- started{s, err}
	}()
	ctl("start")
	var s2 *server
	select {
	case st := <-ch:
		if st.err != nil {
			t.Fatalf("start: %v\n%s", st.err, log2.String())
		}
		s2 = st.s
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve not started 2 minutes after ClickHouse came back:\n%s", log2.String())
	}
	defer s2.shutdown(context.Background())

	got := map[string]float64{}
	for _, l := range strings.Split(scrapeMetrics(t, s2), "\n") {
		rest, ok := strings.CutPrefix(l, "mcpaudit_finding_last_event_timestamp_seconds{")
		if !ok {
			continue
		}
		labels, val, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		got[labels] = v
	}
	for k, w := range newest {
		ws := float64(w.UnixNano()) / 1e9
		if v, ok := got[k]; !ok || math.Abs(v-ws) > 1e-3 {
			t.Errorf("after a start with ClickHouse down and a spool left, last finding gauge {%s} = %v (present %v), want %v (%s, the newest stored)", k, v, ok, ws, w.UTC().Format(time.RFC3339Nano))
		}
	}
	if len(got) != len(newest) {
		t.Errorf("the gauge has %d series, want %d: %v", len(got), len(newest), got)
	}
	for _, l := range strings.Split(log2.String(), "\n") {
		if strings.Contains(l, "cannot seed") || strings.Contains(l, "cannot count the calls stored too late") {
			t.Errorf("the start logged: %s", l)
		}
	}
}
