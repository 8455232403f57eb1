package receiver_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// cancelIngester stands for serve's pipeline over a store whose append
// failed because the request's sender gave up on it: it cancels the
// request's context, as the sender's timeout does, and returns the
// store's error for it. A stand-in (the real store path is
// exporter/sqlite's TestAnswerAside_RequestCanceled): only it cancels at
// the exact point, inside Ingest.
type cancelIngester struct{ cancel context.CancelFunc }

func (c cancelIngester) Ingest(ctx context.Context, _ ...audit.Batch) (int, error) {
	c.cancel()
	return 0, fmt.Errorf("cannot append calls: %w", ctx.Err())
}

// TestIngest_CanceledNotStoreUnavailable (the outside pass live21's D3):
// a request its sender canceled while its calls were being stored is
// counted as canceled, not as store_unavailable, which says the store is
// down (McpAuditStoreRefusingCalls) while mcpaudit_store_ready is 1.
func TestIngest_CanceledNotStoreUnavailable(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, cancelIngester{cancel}, m, slog.New(slog.DiscardHandler)).Handler()
	var body []byte
	for i, c := range benchCalls(1, 5)[0] {
		if i > 0 {
			body = append(body, '\n')
		}
		body = c.AppendRecord(body)
	}
	req := httptest.NewRequestWithContext(ctx, "POST", "/v1/calls", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-ndjson")
	h.ServeHTTP(httptest.NewRecorder(), req)
	e := &env{reg: reg}
	if n := e.rejectedCount(t, metrics.RejectCanceled, metrics.SourceCallsHTTP); n != 5 {
		t.Errorf("%v calls counted as canceled, want 5", n)
	}
	if n := e.rejectedCount(t, metrics.RejectStoreDown, metrics.SourceCallsHTTP); n != 0 {
		t.Errorf("%v calls counted as store_unavailable, want 0: the sender canceled, the store was up", n)
	}
}
