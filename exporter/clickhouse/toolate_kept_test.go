package clickhouse

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
)

// TestOwned_CopiesEveryField (tl24): the copy of a batch kept in memory
// that an insert gets (owned) carries every table of it, as its file would
// (TestSpoolCodec_EveryField), without sharing a row with the kept batch.
// It left out TooLate: a commit's calls too late spooled with Ack "log"
// (every batch) or in an outage with Ack "insert", kept in memory and
// drained alone, reached ClickHouse without them, and TooLateCalls never
// named them. A field added to batch must be filled here, or the test
// fails.
func TestOwned_CopiesEveryField(t *testing.T) {
	b := &batch{
		Calls:      []callRow{filled[callRow](1)},
		Writes:     []writeRow{filled[writeRow](2)},
		Findings:   []findingRow{filled[findingRow](3)},
		Watermarks: []watermarkRow{filled[watermarkRow](4)},
		TooLate:    []tooLateRow{filled[tooLateRow](5)},
		Token:      "tok",
	}
	for t := range b.Done {
		b.Done[t] = true
	}
	got := owned(b, true)
	bv, gv := reflect.ValueOf(b).Elem(), reflect.ValueOf(got).Elem()
	for i := range bv.NumField() {
		f := bv.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if bv.Field(i).IsZero() {
			t.Fatalf("batch.%s is not filled by this test: fill it", f.Name)
		}
		if !reflect.DeepEqual(gv.Field(i).Interface(), bv.Field(i).Interface()) {
			t.Errorf("owned copy of a kept batch: %s = %+v, want %+v", f.Name, gv.Field(i).Interface(), bv.Field(i).Interface())
			continue
		}
		if f.Type.Kind() == reflect.Slice && gv.Field(i).Pointer() == bv.Field(i).Pointer() {
			t.Errorf("owned copy of a kept batch shares the rows of %s: an insert changes them in place", f.Name)
		}
	}
	if !got.spooled {
		t.Error("owned copy of a kept batch is not marked spooled")
	}
	if same := owned(b, false); same != b {
		t.Error("a batch decoded from its file is copied: it is the caller's already")
	}
}

// TestStore_TooLateOfKeptBatch (tl24): a commit naming a call too late
// whose batch the spool keeps in memory and drains alone stores the call
// in too_late, with Ack "log" (every batch passes the spool) and with Ack
// "insert" in an outage. Before, owned dropped the list from the copy the
// drain inserts, and TooLateCalls came back empty. Real ClickHouse; the
// outage is a proxy that refuses connections.
func TestStore_TooLateOfKeptBatch(t *testing.T) {
	base := time.Date(2026, 12, 6, 18, 45, 31, 123456789, time.UTC)
	ref := audit.CallRef{Tenant: "acme", ID: "c_late", Time: base}
	rec := audit.Record{Call: &audit.Call{ID: ref.ID, Tenant: ref.Tenant, Time: ref.Time, Server: "thegram", Tool: "gram_read", Arguments: []byte(`{"path":"a.gram"}`)}}
	for _, tc := range []struct {
		name   string
		ack    string
		outage bool
	}{
		{name: "ack_log", ack: AckLog},
		{name: "ack_insert_outage", ack: AckInsert, outage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			p, dsn := newProxy(t, o.DSN)
			o.DSN, o.Ack = dsn, tc.ack
			s := openStore(t, o)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := s.AppendCalls(ctx, []audit.Record{rec}); err != nil {
				t.Fatal(err)
			}
			// Read once, so that the call's batch is in ClickHouse and the
			// commit's batch drains alone.
			if got, err := s.TooLateCalls(ctx, time.Time{}); err != nil || len(got) != 0 {
				t.Fatalf("TooLateCalls before the commit = %v, %v; want none", got, err)
			}
			if tc.outage {
				p.setDown(true)
			}
			if err := s.Commit(ctx, audit.Results{TooLate: []audit.CallRef{ref}, Watermark: base.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if tc.outage {
				if n, _ := s.SpoolLeft(); n != 1 {
					t.Fatalf("the spool holds %d batches after the commit in the outage, want 1", n)
				}
				p.setDown(false)
				waitReady(t, s, time.Minute)
			}
			got, err := s.TooLateCalls(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Tenant != ref.Tenant || got[0].ID != ref.ID || !got[0].Time.Equal(ref.Time) {
				t.Errorf("TooLateCalls after the commit = %+v, want [%+v]", got, ref)
			}
			if wm, err := s.Watermark(ctx); err != nil || !wm.Equal(base.Add(time.Minute)) {
				t.Errorf("watermark = %v, %v; want %v (the commit's batch was inserted)", wm, err, base.Add(time.Minute))
			}
		})
	}
}
