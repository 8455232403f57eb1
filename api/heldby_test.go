package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestStatus_HeldByIsWhatTheWatermarkFollows: with a real engine, a pod
// on time and a pod whose clock is 2 hours slow (joined after the first:
// its calls are too late and it holds nothing back), the status names the
// on-time pod as the source the partition waits for. Found from outside:
// `mcpaudit status` said HELD BY otlp:thegram/slow2h, the source with the
// earliest clock, while the watermark followed the on-time pod, so an
// operator looking for what held thegram back was sent to the wrong pod.
func TestStatus_HeldByIsWhatTheWatermarkFollows(t *testing.T) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	e.ClockPerPartition()
	rd := dialect.NewReader(dialect.Config{})
	add := func(src string, at time.Time, id int, wall time.Time) {
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), id, id, id)
		dec, err := capture.NewDecoder(bytes.NewReader(line), "line")
		if err != nil {
			t.Fatal(err)
		}
		c, err := dec.Next()
		if err != nil {
			t.Fatal(err)
		}
		e.Add(src, rd.Read(c).Lean(), wall)
	}
	wall := time.Date(2026, 12, 4, 14, 33, 40, 0, time.UTC)
	id := 0
	for i := range 60 {
		id++
		add("otlp:thegram/on-time", wall.Add(-time.Second), id, wall)
		if i >= 30 {
			id++
			add("otlp:thegram/slow2h", wall.Add(-2*time.Hour), id, wall)
		}
		wall = wall.Add(time.Second)
		e.Tick(wall)
	}
	parts := e.Status(wall)
	if len(parts) != 1 || parts[0].TooLate != 30 {
		t.Fatalf("status %+v: want one partition with the slow pod's 30 calls too late", parts)
	}
	s := newStatusServer(t, parts)
	code, _, body := do(t, http.MethodGet, s+"/api/v1/status", "")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var got api.StatusResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if h := got.Partitions[0].HeldBy; h != "otlp:thegram/on-time" {
		t.Errorf("held_by %q, want otlp:thegram/on-time (the source 2 h behind holds nothing back)", h)
	}
}
