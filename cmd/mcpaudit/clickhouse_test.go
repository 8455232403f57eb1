package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clickhouseDSN returns the DSN of the test ClickHouse server that
// scripts/test.sh starts; it skips loudly without one, and fails in CI.
func clickhouseDSN(t *testing.T) string {
	dsn := os.Getenv("MCPAUDIT_CLICKHOUSE_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI is set but MCPAUDIT_CLICKHOUSE_DSN is not: scripts/test.sh must start ClickHouse")
		}
		t.Skip("SKIPPED: no ClickHouse (run scripts/test.sh, or eval \"$(scripts/clickhouse.sh start)\")")
	}
	return dsn
}

// TestServe_ClickHouseMatchesEmbedded sends the example captures through
// serve into ClickHouse and into the embedded store: findings, timelines
// and SLO answers are the same.
func TestServe_ClickHouseMatchesEmbedded(t *testing.T) {
	t.Parallel() // serves of its own, its own ClickHouse database
	dsn := clickhouseDSN(t)
	recs := mergedCapture(t)
	body := ndjson(recs)

	emb := startTest(t, testConfig(t, t.TempDir()))
	chCfg := testConfig(t, t.TempDir())
	chCfg.Serve.Store = "clickhouse"
	chCfg.Serve.ClickHouse.DSN = dsn
	chCfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_serve_%d", time.Now().UnixNano())
	chCfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := chCfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ch := startTest(t, chCfg)

	for _, s := range []*server{emb, ch} {
		resp := postCalls(t, s, body, false)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("post: %s", resp.Status)
		}
	}
	want := analyzeFindings(t, chCfg, body)
	waitFindings(t, emb, want)
	waitFindings(t, ch, want)
	// Each store exports its own faults, at zero.
	m := scrapeMetrics(t, ch)
	for _, f := range []string{"spool_file_rejected", "spool_tail_cut"} {
		if !strings.Contains(m, `mcpaudit_store_faults_total{fault="`+f+`"} 0`) {
			t.Errorf("the ClickHouse store's /metrics lacks %s at 0", f)
		}
	}

	same := func(path string) {
		t.Helper()
		var a, b any
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			getJSON(t, "http://"+emb.apiAddr+path, &a)
			getJSON(t, "http://"+ch.apiAddr+path, &b)
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if bytes.Equal(ja, jb) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s differs:\nembedded   %s\nclickhouse %s", path, ja, jb)
			}
		}
	}
	for _, doc := range []string{"ops/notes-1d0459.gram", "doc_3e9c3b62dbf0f508", "gdrive-shared/61191af3.gram", "doc_b84cfb20944506d3"} {
		same("/api/v1/documents/" + url.PathEscape(doc) + "/timeline")
	}
	same("/api/v1/slo?window=3650d&until=2026-12-01T00:00:00Z")
	same("/api/v1/writes?state=unverified&limit=100")
	same("/api/v1/findings?kind=double_applied_write&limit=100")
	same("/api/v1/findings?order=newest&limit=100")
	same("/api/v1/findings/counts")
	same("/api/v1/findings/" + want[0].ID())

	// Every stored call, page by page (cursors differ between the stores;
	// the calls must not), filtered, and one by id.
	allCalls := func(base, path string) []json.RawMessage {
		t.Helper()
		var out []json.RawMessage
		for cursor := ""; ; {
			var page struct {
				Calls      []json.RawMessage `json:"calls"`
				NextCursor string            `json:"next_cursor"`
			}
			getJSON(t, base+path+"&cursor="+url.QueryEscape(cursor), &page)
			out = append(out, page.Calls...)
			if page.NextCursor == "" {
				return out
			}
			cursor = page.NextCursor
		}
	}
	for _, path := range []string{"/api/v1/calls?limit=37", "/api/v1/calls?server=oddlynew&limit=5",
		"/api/v1/calls?document=ops%2Fnotes-1d0459.gram&limit=2", "/api/v1/calls?since=2026-01-01T00:00:00Z&limit=1000"} {
		a, b := allCalls("http://"+emb.apiAddr, path), allCalls("http://"+ch.apiAddr, path)
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if len(a) == 0 || !bytes.Equal(ja, jb) {
			t.Errorf("%s: %d calls embedded, %d clickhouse; they differ:\nembedded   %s\nclickhouse %s", path, len(a), len(b), ja, jb)
		}
	}
	var first struct {
		CallID string `json:"call_id"`
	}
	json.Unmarshal(allCalls("http://"+emb.apiAddr, "/api/v1/calls?limit=1")[0], &first)
	same("/api/v1/calls/" + first.CallID)

	// The report from each store, through the server and through the CLI
	// reading ClickHouse itself, has the same numbers.
	reportOf := func(b []byte) string {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("report: %v: %s", err, b)
		}
		delete(m, "generated")
		j, _ := json.Marshal(m)
		return string(j)
	}
	const rq = "/api/v1/report?window=3650d&until=2026-12-01T00:00:00Z"
	var a, b json.RawMessage
	getJSON(t, "http://"+emb.apiAddr+rq, &a)
	getJSON(t, "http://"+ch.apiAddr+rq, &b)
	if ra, rb := reportOf(a), reportOf(b); ra != rb {
		t.Errorf("reports differ:\nembedded   %s\nclickhouse %s", ra, rb)
	}
	cfgFile := t.TempDir() + "/mcpaudit.yaml"
	os.WriteFile(cfgFile, []byte(fmt.Sprintf("serve:\n  store: clickhouse\n  clickhouse: {dsn: %q, database: %q}\n",
		dsn, chCfg.Serve.ClickHouse.Database)), 0o644)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"report", "--config", cfgFile, "--window", "3650d", "--until", "2026-12-01T00:00:00Z", "--format", "json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("report --store clickhouse: exit %d: %s", code, errb.String())
	}
	if rc, ra := reportOf(out.Bytes()), reportOf(a); rc != ra {
		t.Errorf("the CLI's report from ClickHouse differs:\ncli      %s\nembedded %s", rc, ra)
	}
	// The page over ClickHouse.
	checkLinks(t, "http://"+ch.apiAddr, "/?kind=double_applied_write", 40)
}

// TestServe_ClickHouseSpoolFileRejected: a spool file left damaged by a
// crash (renamed, its data never on disk: empty) is moved aside by the
// drain at start, before Prometheus could scrape anything, and /metrics
// counts it: spool_file_rejected is 1 from the first scrape, so that
// McpAuditSpoolFileRejected pages.
func TestServe_ClickHouseSpoolFileRejected(t *testing.T) {
	dsn := clickhouseDSN(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Store = "clickhouse"
	cfg.Serve.ClickHouse.DSN = dsn
	cfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_serve_%d", time.Now().UnixNano())
	cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(cfg.Serve.DataDir, "clickhouse-spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, "00000000000000000001.batch"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	const want = `mcpaudit_store_faults_total{fault="spool_file_rejected"} 1`
	var text string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if text = scrapeMetrics(t, s); strings.Contains(text, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, `fault="id_index_write"`) {
		t.Error("the ClickHouse store exports id_index_write, a fault of the embedded store")
	}
	if _, err := os.Stat(filepath.Join(spool, "00000000000000000001.rejected")); err != nil {
		t.Errorf("the damaged file was not moved aside: %v", err)
	}
	// The file is there until a person moves it out; the gauge follows the
	// directory, not the count.
	if !strings.Contains(text, `mcpaudit_spool_files_set_aside{file="rejected"} 1`) {
		t.Errorf("/metrics lacks the rejected file set aside:\n%s", grepLines(text, "set_aside"))
	}
	// The spool's usage, against its limit (1 GiB by default).
	if !strings.Contains(text, "\nmcpaudit_spool_bytes ") || !strings.Contains(text, "\nmcpaudit_spool_limit_bytes 1.073741824e+09") {
		t.Errorf("/metrics lacks the spool's usage:\n%s", grepLines(text, "spool_bytes", "spool_limit"))
	}
	if err := os.Rename(filepath.Join(spool, "00000000000000000001.rejected"), filepath.Join(t.TempDir(), "handled")); err != nil {
		t.Fatal(err)
	}
	if text = scrapeMetrics(t, s); !strings.Contains(text, `mcpaudit_spool_files_set_aside{file="rejected"} 0`) ||
		!strings.Contains(text, want) {
		t.Errorf("after the file was moved out, /metrics says:\n%s", grepLines(text, "set_aside", "spool_file_rejected"))
	}
}

// grepLines returns the lines of text that contain any of subs.
func grepLines(text string, subs ...string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}
