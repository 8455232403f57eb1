package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// newStatusServer serves the API with a pipeline whose status is parts.
func newStatusServer(t *testing.T, parts []detect.PartitionStatus) string {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return parts, 0, 0 }
	srv := httptest.NewServer(q.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStatus_SourceTotals: serve keeps a source's clock and counts per
// partition, so a poster that feeds two servers is told once with the sum
// of its counts over both, not with the first partition's.
func TestStatus_SourceTotals(t *testing.T) {
	wm := t0.Add(time.Minute)
	parts := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Server: "oddlynew"}, Watermark: wm, Counts: detect.Counts{Calls: 21}, Sources: []detect.SourceStatus{
			{Name: "calls:10.0.0.7", LastEvent: wm, Counts: detect.Counts{Calls: 21, Late: 1}},
			{Name: "otlp:oddlynew", LastEvent: wm, Counts: detect.Counts{Calls: 4}},
		}},
		{PartitionKey: detect.PartitionKey{Server: "thegram"}, Watermark: wm, Counts: detect.Counts{Calls: 48}, Sources: []detect.SourceStatus{
			{Name: "calls:10.0.0.7", LastEvent: wm, Counts: detect.Counts{Calls: 45, TooLate: 3, Ahead: 2, Behind: 2}},
		}},
		{PartitionKey: detect.PartitionKey{Tenant: "acme", Server: "thegram"}, Watermark: wm, Counts: detect.Counts{Calls: 7}, Sources: []detect.SourceStatus{
			{Name: "calls:10.0.0.7", LastEvent: wm, Counts: detect.Counts{Calls: 7}},
		}},
	}
	got := statusOf(t, parts)
	want := map[[2]string]api.SourceTotals{
		{"", "calls:10.0.0.7"}:     {Servers: []string{"oddlynew", "thegram"}, Counts: api.Counts{Calls: 66, Late: 1, TooLate: 3, Ahead: 2, Behind: 2}},
		{"", "otlp:oddlynew"}:      {Servers: []string{"oddlynew"}, Counts: api.Counts{Calls: 4}},
		{"acme", "calls:10.0.0.7"}: {Servers: []string{"thegram"}, Counts: api.Counts{Calls: 7}},
	}
	if len(got.Sources) != len(want) {
		t.Fatalf("%d sources, want %d: %+v", len(got.Sources), len(want), got.Sources)
	}
	for _, s := range got.Sources {
		w, ok := want[[2]string{s.Tenant, s.Name}]
		w.Tenant, w.Name = s.Tenant, s.Name
		if !ok || s.Calls != w.Calls || s.Late != w.Late || s.TooLate != w.TooLate || s.Ahead != w.Ahead || s.Behind != w.Behind || len(s.Servers) != len(w.Servers) {
			t.Errorf("source %+v, want %+v", s, w)
		}
	}
}

// TestStatus_LastSeenUnknown: a source whose last delivery is unknown
// (restored from a state file that did not keep it, and quiet since) has
// no last_seen in the answer, rather than 0001-01-01; a known one is
// given.
func TestStatus_LastSeenUnknown(t *testing.T) {
	wm := t0.Add(time.Minute)
	parts := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Server: "thegram"}, Watermark: wm, Sources: []detect.SourceStatus{
			{Name: "calls:restored", LastEvent: wm},
			{Name: "calls:live", LastEvent: wm, LastSeen: wm.Add(time.Second)},
		}},
	}
	body := statusBody(t, parts)
	var got struct {
		Partitions []struct {
			Sources []map[string]any `json:"sources"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &got); err != nil || len(got.Partitions) != 1 {
		t.Fatalf("%v: %s", err, body)
	}
	for _, src := range got.Partitions[0].Sources {
		seen, ok := src["last_seen"]
		switch src["name"] {
		case "calls:restored":
			if ok {
				t.Errorf("restored source: last_seen %v, want none", seen)
			}
		case "calls:live":
			if seen != wm.Add(time.Second).Format(time.RFC3339Nano) {
				t.Errorf("live source: last_seen %v, want %s", seen, wm.Add(time.Second).Format(time.RFC3339Nano))
			}
		}
	}
}

// TestStatus_TooLateSpan: the status tells, for each partition and source,
// the event-time span of the calls not judged (too late), so that an
// operator knows which findings may be missing; a source feeding two
// servers gets the span over both, and a source with none has no span.
func TestStatus_TooLateSpan(t *testing.T) {
	wm := t0.Add(10 * time.Minute)
	a, b, c, d := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute), t0.Add(4*time.Minute)
	parts := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Server: "oddlynew"}, Watermark: wm, Counts: detect.Counts{TooLate: 5, TooLateFrom: c, TooLateTo: d}, Sources: []detect.SourceStatus{
			{Name: "shipper", LastEvent: wm, Counts: detect.Counts{TooLate: 5, TooLateFrom: c, TooLateTo: d}},
			{Name: "otlp:oddlynew", LastEvent: wm, Counts: detect.Counts{Calls: 4}},
		}},
		{PartitionKey: detect.PartitionKey{Server: "thegram"}, Watermark: wm, Counts: detect.Counts{TooLate: 2, TooLateFrom: a, TooLateTo: b}, Sources: []detect.SourceStatus{
			{Name: "shipper", LastEvent: wm, Counts: detect.Counts{TooLate: 2, TooLateFrom: a, TooLateTo: b}},
		}},
	}
	got := statusOf(t, parts)
	span := func(from, to *time.Time) string {
		if from == nil || to == nil {
			return "none"
		}
		return from.Sub(t0).String() + ".." + to.Sub(t0).String()
	}
	for _, p := range got.Partitions {
		want := map[string]string{"oddlynew": "3m0s..4m0s", "thegram": "1m0s..2m0s"}[p.Server]
		if g := span(p.TooLateFrom, p.TooLateTo); g != want {
			t.Errorf("partition %s: too late %s, want %s", p.Server, g, want)
		}
	}
	for _, src := range got.Sources {
		want := map[string]string{"shipper": "1m0s..4m0s", "otlp:oddlynew": "none"}[src.Name]
		if g := span(src.TooLateFrom, src.TooLateTo); g != want {
			t.Errorf("source %s: too late %s, want %s", src.Name, g, want)
		}
	}
}

// TestStatus_OverflowTooLateSenders: the overflow source of two servers is
// told once; the senders of its calls too late, which the engine keeps
// per partition, are given in the answer (too_late_senders) over both,
// each once, at most detect.TooLateSendersKept.
func TestStatus_OverflowTooLateSenders(t *testing.T) {
	wm := t0.Add(time.Minute)
	over := func(server string, senders ...string) detect.PartitionStatus {
		return detect.PartitionStatus{PartitionKey: detect.PartitionKey{Server: server}, Watermark: wm, Sources: []detect.SourceStatus{
			{Name: "calls:poster-0", LastEvent: wm, Counts: detect.Counts{Calls: 5}},
			{Name: detect.OverflowSource, Overflow: true, LastEvent: wm, TooLateSenders: senders, Counts: detect.Counts{Calls: 9, TooLate: int64(len(senders))}},
		}}
	}
	many := []string{"calls:a", "calls:b", "calls:c", "calls:d", "calls:e", "calls:f"}[:detect.TooLateSendersKept]
	st := statusOf(t, []detect.PartitionStatus{over("thegram", "calls:poster-3", "calls:poster-7"), over("oddlynew", append([]string{"calls:poster-7"}, many...)...)})
	var got []string
	for _, s := range st.Sources {
		if s.Name == "calls:poster-0" && s.TooLateSenders != nil {
			t.Errorf("calls:poster-0 names too-late senders %q; want none", s.TooLateSenders)
		}
		if s.Name == detect.OverflowSource {
			got = s.TooLateSenders
		}
	}
	want := append([]string{"calls:poster-3", "calls:poster-7"}, many...)[:detect.TooLateSendersKept]
	if !slices.Equal(got, want) {
		t.Errorf("too_late_senders %q; want %q", got, want)
	}
}

// TestStatus_PendingWrites: the answer counts the judged writes still
// pending per partition, with the event time the last of their windows
// ends, and in all over the partitions shown; a partition with none has
// 0 and no pending_until.
func TestStatus_PendingWrites(t *testing.T) {
	until := time.Date(2026, 12, 4, 18, 33, 39, 0, time.UTC)
	parts := []detect.PartitionStatus{
		{PartitionKey: detect.PartitionKey{Server: "thegram"}, Pending: 3, PendingUntil: until},
		{PartitionKey: detect.PartitionKey{Server: "oddlynew"}, Pending: 2, PendingUntil: until.Add(-time.Minute)},
		{PartitionKey: detect.PartitionKey{Server: "quiet"}},
	}
	f := func(server string, wantTotal int) {
		t.Helper()
		st := api.StatusFrom(parts, 0, 0, "", server, until)
		if st.PendingWrites != wantTotal {
			t.Errorf("server %q: pending_writes %d, want %d", server, st.PendingWrites, wantTotal)
		}
		for _, p := range st.Partitions {
			var want detect.PartitionStatus
			for _, q := range parts {
				if q.Server == p.Server {
					want = q
				}
			}
			if p.PendingWrites != want.Pending || (p.PendingUntil == nil) != want.PendingUntil.IsZero() ||
				(p.PendingUntil != nil && !p.PendingUntil.Equal(want.PendingUntil)) {
				t.Errorf("%s: pending %d until %v, want %d until %v", p.Server, p.PendingWrites, p.PendingUntil, want.Pending, want.PendingUntil)
			}
		}
		b, _ := json.Marshal(st)
		var m map[string]any
		json.Unmarshal(b, &m)
		if _, ok := m["pending_writes"]; !ok {
			t.Errorf("the answer lacks pending_writes: %s", b)
		}
	}
	f("", 5)
	f("oddlynew", 2)
	f("quiet", 0)
}
