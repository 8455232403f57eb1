package clickhouse

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestSpool_TooLateDrained (rev15a): with Ack "log" through an outage, the
// commits naming calls too late are spooled with their watermark; once
// ClickHouse answers, the spool drains and TooLateCalls reads every call
// named, once (one named by two commits, as a retried commit does), for
// every tenant, with its time to the nanosecond, and the watermark of the
// last commit.
func TestSpool_TooLateDrained(t *testing.T) {
	o := testOptions(t)
	o.Ack = AckLog
	down := o
	down.DSN = "clickhouse://127.0.0.1:1/default?dial_timeout=200ms"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, down)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	rec := func(id, tenant string, at time.Time) audit.Record {
		return audit.Record{Call: &audit.Call{ID: id, Tenant: tenant, Time: at, Server: "thegram", Tool: "gram_read", Arguments: []byte(`{"path":"a.gram"}`)}}
	}
	refs := []audit.CallRef{
		{Tenant: "", ID: "c_late_1", Time: base.Add(time.Second + 123456789)},
		{Tenant: "acme", ID: "c_late_1", Time: base.Add(2*time.Second + 7)},
		{Tenant: "acme", ID: "c_late_2", Time: base.Add(3 * time.Second)},
	}
	for _, r := range refs {
		if _, err := s.AppendCalls(ctx, []audit.Record{rec(r.ID, r.Tenant, r.Time)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(ctx, audit.Results{TooLate: refs[:2], Watermark: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, audit.Results{TooLate: refs[1:], Watermark: base.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, o)
	waitReady(t, s, 30*time.Second)
	got, err := s.TooLateCalls(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(a audit.CallRef) string { return a.Tenant + "/" + a.ID + "@" + a.Time.Format(time.RFC3339Nano) }
	var gk, wk []string
	for _, r := range got {
		gk = append(gk, key(r))
	}
	for _, r := range refs {
		wk = append(wk, key(r))
	}
	slices.Sort(gk)
	slices.Sort(wk)
	if !slices.Equal(gk, wk) {
		t.Errorf("calls too late after the spool drained: %v, want %v", gk, wk)
	}
	if wm, err := s.Watermark(ctx); err != nil || !wm.Equal(base.Add(2*time.Minute)) {
		t.Errorf("watermark after the spool drained: %v, %v; want %v", wm, err, base.Add(2*time.Minute))
	}
}
