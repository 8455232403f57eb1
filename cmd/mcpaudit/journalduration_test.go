package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/forward"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// TestJournal_InFlightRecordHasNoDuration (prox17): the record a relay
// journals for a call in flight, sent as it is if the relay dies, has no
// duration_ms (optional in the capture format): how long the call stayed
// in flight is unknown. Before, it said 0 ms, an instant answer.
func TestJournal_InFlightRecordHasNoDuration(t *testing.T) {
	cfg := forward.NewDefaultConfig()
	cfg.URL, cfg.Source, cfg.BufferDir = "http://127.0.0.1:1", "proxy/thegram/test", t.TempDir()
	m, err := metrics.NewRelay(metrics.NewRegistry(), "thegram")
	if err != nil {
		t.Fatal(err)
	}
	f, err := forward.New(cfg, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(context.Background())
	sink := forwardSink{f: f, log: slog.New(slog.DiscardHandler)}
	sink.Journal().Begin(1, &tap.Record{Time: time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC), Server: "thegram",
		Request: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_read","arguments":{"path":"a"}}}`)})
	js, _ := filepath.Glob(filepath.Join(cfg.BufferDir, "*.journal"))
	if len(js) != 1 {
		t.Fatalf("journals %v; want one", js)
	}
	b, err := os.ReadFile(js[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"request":`) || strings.Contains(string(b), "duration_ms") {
		t.Errorf("journal:\n%s\nwant the call's record without duration_ms", b)
	}
}
