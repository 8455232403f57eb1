package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestCallPageNamesSender: calls taken by serve's receiver, OTLP spans of
// two pods in one request and call records a poster named, each show on
// their call page the sender they came on, as status names it.
func TestCallPageNamesSender(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pcfg := pipeline.NewDefaultConfig()
	pcfg.CommitEvery = 10 * time.Millisecond
	p, err := pipeline.New(context.Background(), pcfg, detect.NewDefaultConfig(), st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	rc := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, p, nil, log)
	ingest := httptest.NewServer(rc.Handler())
	t.Cleanup(ingest.Close)
	post := func(path, ctype string, body []byte, header ...string) {
		t.Helper()
		req, _ := http.NewRequest("POST", ingest.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || bytes.Contains(b, []byte("rejected")) && !bytes.Contains(b, []byte(`"rejected":0`)) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}

	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	want := map[string]string{} // JSON-RPC id: sender
	td := ptrace.NewTraces()
	for i, pod := range []string{"pod-a", "pod-b"} {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "thegram")
		rs.Resource().Attributes().PutStr("service.instance.id", pod)
		rs.Resource().Attributes().PutStr("host.name", "node-2")
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName("tools/call gram_read")
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetTraceID(pcommon.TraceID([16]byte{1, byte(i)}))
		sp.SetSpanID(pcommon.SpanID([8]byte{2, byte(i)}))
		at := start.Add(time.Duration(i) * time.Millisecond)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(at))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(time.Millisecond)))
		sp.Attributes().PutStr("mcp.method.name", "tools/call")
		sp.Attributes().PutStr("gen_ai.tool.name", "gram_read")
		sp.Attributes().PutStr("mcp.session.id", "s1")
		sp.Attributes().PutStr("jsonrpc.request.id", fmt.Sprint(i))
		want[fmt.Sprint(i)] = "otlp:thegram/" + pod + "/node-2"
	}
	b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	post("/v1/traces", "application/x-protobuf", b)
	rec, _ := json.Marshal(map[string]any{
		"time": start.Add(time.Second).Format(time.RFC3339Nano), "server": "thegram", "session": "s1",
		"request":  map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": map[string]any{"name": "gram_read", "arguments": map[string]any{"path": "a.gram"}}},
		"response": map[string]any{"jsonrpc": "2.0", "id": 7, "result": map[string]any{"content": []any{}}},
	})
	post("/v1/calls", "application/x-ndjson", rec, "Mcpaudit-Source", "x")
	want["7"] = "calls:x"

	pg, err := New(st, api.New(st, 0.999), Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(pg.Handler())
	t.Cleanup(hs.Close)
	page, err := st.Calls(context.Background(), audit.CallQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Calls) != len(want) {
		t.Fatalf("%d calls stored, want %d", len(page.Calls), len(want))
	}
	for _, r := range page.Calls {
		code, html := body(t, client(t), "GET", hs.URL+"/calls/"+r.Call.ID, nil)
		row := "<tr><th>source</th><td class=\"mono\">" + want[r.Call.RPCID] + "</td></tr>"
		if code != 200 || !strings.Contains(html, row) {
			t.Errorf("call %s: %d, the page does not hold %s", r.Call.RPCID, code, row)
		}
	}
}
