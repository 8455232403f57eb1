package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestStatus_StoreNotReady: `mcpaudit status` says when the store is not
// ready, with the store's reason, and says nothing of it when the store is
// ready or the server does not say (an older serve). Found from outside:
// during a ClickHouse outage the status said nothing.
func TestStatus_StoreNotReady(t *testing.T) {
	show := func(s *api.StoreStatus) string {
		var b bytes.Buffer
		printStatus(&b, api.StatusResponse{Time: time.Date(2026, 12, 5, 17, 31, 0, 0, time.UTC), Store: s}, false)
		return b.String()
	}
	const reason = "clickhouse unavailable: store unavailable: dial tcp 127.0.0.1:31490: connect: connection refused; 12 batches (80231 bytes) wait in the spool"
	if out := show(&api.StoreStatus{Reason: reason}); !strings.Contains(out, "Store not ready: "+reason+".") {
		t.Errorf("store not ready, output lacks the reason:\n%s", out)
	}
	for _, s := range []*api.StoreStatus{{Ready: true}, nil} {
		if out := show(s); strings.Contains(out, "Store not ready") {
			t.Errorf("store %+v: output says not ready:\n%s", s, out)
		}
	}
}
