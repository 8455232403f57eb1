package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
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

// TestStatus_LastDowntime: `mcpaudit status` says, while the API tells
// it, how long serve was down before it started and that calls sent
// meanwhile may be missing.
func TestStatus_LastDowntime(t *testing.T) {
	from := time.Date(2026, 12, 5, 17, 30, 0, 0, time.UTC)
	d := &api.Downtime{From: from, To: from.Add(2 * time.Minute), Seconds: 120}
	var b bytes.Buffer
	printStatus(&b, api.StatusResponse{Time: from.Add(3 * time.Minute), LastDowntime: d}, false)
	want := "Serve was down from 2026-12-05T17:30:00Z to 2026-12-05T17:32:00Z (2m0s) before it started: calls sent meanwhile arrive only from senders that kept them"
	if !strings.Contains(b.String(), want) || !strings.Contains(b.String(), "docs/runbooks.md#after-serve-was-down") {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	printStatus(&b, api.StatusResponse{Time: from.Add(3 * time.Minute)}, false)
	if strings.Contains(b.String(), "Serve was down") || strings.Contains(b.String(), "Downtimes:") {
		t.Errorf("no downtime told, yet the output says one:\n%s", b.String())
	}

	// The history: how many, how many after a crash, the latest three
	// newest first, whether or not the last one is still told.
	var ds []api.Downtime
	for i, end := range []string{audit.EndStop, audit.EndCrash, audit.EndStop, audit.EndCrash, audit.EndUnknown} {
		at := from.Add(time.Duration(i) * time.Hour)
		ds = append(ds, api.Downtime{From: at, To: at.Add(4 * time.Second), Seconds: 4, End: end})
	}
	b.Reset()
	printStatus(&b, api.StatusResponse{Time: from.Add(10 * time.Hour), Downtimes: ds}, false)
	want = "Downtimes: serve was down 5 times in the history it keeps (the last 100; 2 after a crash), latest first: " +
		"2026-12-05T21:30:00Z to 2026-12-05T21:30:04Z (4s, unknown); 2026-12-05T20:30:00Z to 2026-12-05T20:30:04Z (4s, crash); 2026-12-05T19:30:00Z to 2026-12-05T19:30:04Z (4s, stop)."
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "18:30:00Z") {
		t.Errorf("output lacks %q (or names more):\n%s", want, b.String())
	}
}
