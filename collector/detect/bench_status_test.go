package detect_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkStatus_PendingWrites takes the status of an engine whose one
// partition holds 100,000 writes left pending (sync pending, their windows
// open): the status a serve takes every second and at each
// /api/v1/status. It runs against builds with and without the pending
// count alike (only public API).
func BenchmarkStatus_PendingWrites(b *testing.B) {
	e := detect.NewEngine(detect.NewDefaultConfig())
	t0 := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	const n = 100_000
	for i := range n {
		at := t0.Add(time.Duration(i) * 2 * time.Millisecond) // 200 s
		doc := fmt.Sprintf("d%d.gram", i)
		r := &audit.Record{
			Call:    &audit.Call{ID: fmt.Sprintf("c_%020d", i), Time: at, Server: "thegram", Session: "s", RPCID: fmt.Sprint(i), Method: "tools/call", Tool: "gram_patch", Responded: true},
			Dialect: "thegram", Outcome: audit.OutcomeOK, Tool: "gram_patch",
			Ops: []audit.Op{{Tool: "gram_patch", Kind: audit.OpWrite, Target: doc, Status: audit.OpSucceeded, Pending: true, Reason: "sync_pending"}},
		}
		e.Add("pod", r, time.Time{})
	}
	e.Flush()
	now := t0.Add(201 * time.Second)
	pending := -1
	for _, ps := range e.Status(now) {
		pending = max(pending, pendingOf(ps))
	}
	b.ResetTimer()
	for range b.N {
		e.Status(now)
	}
	b.ReportMetric(float64(pending), "pending")
}
