package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestServe_ResponseCollisionStored: a call whose id is stored comes again
// with another response, when the engine no longer holds the first (later
// than allowed_lateness) and after a restart (the replay reads the first
// from the store, without a response sum). Each time the store compares
// the two responses: the second is counted as an id collision (the status
// of its partition and source, mcpaudit_pipeline_id_collisions_total) and
// logged (kind=id_collision, differs="[response]"), once, not also as too
// late. The same call sent again with its stored response is a plain
// duplicate, neither counted nor logged.
func TestServe_ResponseCollisionStored(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	logs := &lockedBuffer{}
	start := func() *server { return startLogging(t, cfg, logs) }
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond).Add(250 * time.Microsecond)
	line := func(rpc int, at time.Time, rev int) []byte {
		return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s1","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"projects":[%d]}}}}`+"\n",
			at.Format(time.RFC3339Nano), rpc, rpc, rev)
	}
	type counts struct {
		Name         string `json:"name"`
		Server       string `json:"server"`
		TooLate      int64  `json:"too_late"`
		IDCollisions int64  `json:"id_collisions"`
	}
	check := func(s *server, when string, want, tooLate int64) {
		t.Helper()
		var st struct {
			Partitions []counts `json:"partitions"`
			Sources    []counts `json:"sources"`
		}
		getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
		var part, src *counts
		for i := range st.Partitions {
			if st.Partitions[i].Server == "thegram" {
				part = &st.Partitions[i]
			}
		}
		for i := range st.Sources {
			if st.Sources[i].Name == "calls:poster" {
				src = &st.Sources[i]
			}
		}
		if part == nil || src == nil {
			t.Fatalf("%s: the status has no partition thegram or no source poster: %+v", when, st)
		}
		if part.IDCollisions != want || src.IDCollisions != want {
			t.Errorf("%s: id collisions: partition %d, source %d; want %d", when, part.IDCollisions, src.IDCollisions, want)
		}
		if part.TooLate != tooLate {
			t.Errorf("%s: %d calls counted too late, want %d (a call sent again, held by the store, is a duplicate; the other response is an id collision, not a late call)", when, part.TooLate, tooLate)
		}
		metric := fmt.Sprintf(`mcpaudit_pipeline_id_collisions_total{server="thegram"} %d`, want)
		if text := scrapeMetrics(t, s); !strings.Contains(text, metric) {
			t.Errorf("%s: /metrics lacks %s", when, metric)
		}
	}
	collisionLines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "kind=id_collision") {
				out = append(out, l)
			}
		}
		return out
	}

	s := start()
	postAs(t, s.ingestAddr, "poster", line(1, t0, 1))
	// A later call moves the watermark on: the engine forgets the first
	// (allowed_lateness 2m); the source then goes idle (1 s) and the
	// watermark follows the wall clock.
	postAs(t, s.ingestAddr, "poster", line(2, t0.Add(10*time.Minute), 1))
	time.Sleep(1500 * time.Millisecond)
	check(s, "before", 0, 0)
	// Another response under its id.
	postAs(t, s.ingestAddr, "poster", line(1, t0, 2))
	check(s, "another response, the first forgotten by the engine", 1, 0)
	// The same call, its response the same: a plain duplicate, held by
	// the store, not also counted too late (live21's D4; it was until
	// then, as this test wanted).
	postAs(t, s.ingestAddr, "poster", line(1, t0, 1))
	check(s, "the same response again", 1, 0)
	if l := collisionLines(); len(l) != 1 {
		t.Fatalf("%d id_collision lines, want 1:\n%s", len(l), logs.String())
	}
	stopServer(t, s)

	// After a restart the first call is read back from the store.
	s = start()
	defer stopServer(t, s)
	postAs(t, s.ingestAddr, "poster", line(1, t0, 3))
	check(s, "another response after a restart", 1, 0)
	postAs(t, s.ingestAddr, "poster", line(1, t0, 1))
	check(s, "the same response again after a restart", 1, 0)
	lines := collisionLines()
	if len(lines) != 2 {
		t.Fatalf("%d id_collision lines, want 2:\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		for _, want := range []string{"level=WARN", "server=thegram", "source=calls:poster", "call_id=c_", "differs=[response]",
			"time=" + t0.Format("2006-01-02T15:04:05.000")} {
			if !strings.Contains(l, want) {
				t.Errorf("the line lacks %s: %s", want, l)
			}
		}
	}
	// The first response is the one stored, once.
	var results []string
	if err := s.store.ScanCalls(context.Background(), t0.Add(-time.Second), func(r *audit.Record) error {
		if r.Call.Time.Before(t0.Add(time.Second)) {
			results = append(results, string(r.Call.Result))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || !strings.Contains(results[0], `"projects":[1]`) {
		t.Errorf("stored responses at %s: %q, want the first one alone (projects [1])", t0, results)
	}
}

// TestServe_ResponseCollisionStoredSpans: the same over OTLP. A span sent
// again after a restart with another recorded result
// (gen_ai.tool.call.result) is counted and logged as an id collision; one
// sent again without its result (status OK: it answered, content unknown)
// says too little of its response to tell, and is a plain duplicate.
func TestServe_ResponseCollisionStoredSpans(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	logs := &lockedBuffer{}
	start := func() *server { return startLogging(t, cfg, logs) }
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	span := func(at time.Time, result string) []byte {
		attrs := `{"key":"mcp.method.name","value":{"stringValue":"tools/call"}},{"key":"gen_ai.tool.name","value":{"stringValue":"gram_projects"}},` +
			`{"key":"mcp.session.id","value":{"stringValue":"s1"}},{"key":"jsonrpc.request.id","value":{"stringValue":"7"}},` +
			`{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{}"}}`
		// Without its result, a span whose status is OK answered, with
		// content unknown.
		status := `{"code":1}`
		if result != "" {
			attrs += `,{"key":"gen_ai.tool.call.result","value":{"stringValue":` + strconv.Quote(result) + `}}`
			status = `{}`
		}
		return fmt.Appendf(nil, `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"thegram"}}]},"scopeSpans":[{"spans":[`+
			`{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"tools/call gram_projects","kind":2,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[%s],"status":%s}]}]}]}`,
			at.UnixNano(), at.Add(50*time.Millisecond).UnixNano(), attrs, status)
	}
	post := func(s *server, body []byte) {
		t.Helper()
		resp, err := http.Post("http://"+s.ingestAddr+"/v1/traces", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(string(b), "rejected") {
			t.Fatalf("POST /v1/traces: %s %s", resp.Status, b)
		}
	}
	collisions := func(s *server) int64 {
		var st struct {
			Partitions []struct {
				Server       string `json:"server"`
				IDCollisions int64  `json:"id_collisions"`
			} `json:"partitions"`
		}
		getJSON(t, "http://"+s.apiAddr+"/api/v1/status", &st)
		var n int64
		for _, p := range st.Partitions {
			n += p.IDCollisions
		}
		return n
	}
	s := start()
	post(s, span(t0, `{"isError":false,"structuredContent":{"projects":[1]}}`))
	stopServer(t, s)

	s = start()
	defer s.shutdown(context.Background())
	post(s, span(t0, `{ "structuredContent": {"projects":[1]}, "isError": false }`))
	post(s, span(t0, ""))
	if n := collisions(s); n != 0 {
		t.Errorf("the same span sent again, and without its result: %d id collisions, want 0", n)
	}
	post(s, span(t0, `{"isError":false,"structuredContent":{"projects":[2]}}`))
	if n := collisions(s); n != 1 {
		t.Errorf("the span sent again with another result: %d id collisions, want 1", n)
	}
	if n := strings.Count(logs.String(), "kind=id_collision"); n != 1 || !strings.Contains(logs.String(), "differs=[response]") {
		t.Errorf("%d id_collision lines, want 1 with differs=[response]:\n%s", n, logs.String())
	}
}

// startLogging starts serve with cfg, its warnings and errors logged to
// logs, for a test that stops and starts it again (stopServer).
func startLogging(t *testing.T, cfg Config, logs *lockedBuffer) *server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := startServer(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stopServer shuts s down, failing the test if it does not stop cleanly
// within 10 s.
func stopServer(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
