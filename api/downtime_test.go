package api_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestStatus_LastDowntime: the status tells the time serve was down before
// it started, for DowntimeShown after the start, and nothing when the
// downtime is unknown; it tells a ready embedded store as ready.
func TestStatus_LastDowntime(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	from := time.Date(2026, 12, 5, 17, 30, 0, 0, time.UTC)
	to := from.Add(2*time.Minute + 3*time.Second)
	q := api.New(st, 0.999)
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return nil, 0, 0 }
	down := func() (time.Time, time.Time) { return from, to }
	q.Downtime = func() (time.Time, time.Time) { return down() }
	f := func(now time.Time, want bool) {
		t.Helper()
		out, ok := q.StatusOf("", "", now)
		if !ok {
			t.Fatal("no status")
		}
		if out.Store == nil || !out.Store.Ready {
			t.Errorf("store %+v, want ready", out.Store)
		}
		d := out.LastDowntime
		if !want {
			if d != nil {
				t.Errorf("at %v: last downtime %+v, want none", now, *d)
			}
			return
		}
		if d == nil || !d.From.Equal(from) || !d.To.Equal(to) || d.Seconds != 123 {
			t.Errorf("at %v: last downtime %+v, want %v to %v, 123 s", now, d, from, to)
		}
	}
	f(to.Add(time.Second), true)
	f(to.Add(api.DowntimeShown-time.Second), true)
	f(to.Add(api.DowntimeShown), false)
	down = func() (time.Time, time.Time) { return time.Time{}, time.Time{} }
	f(to.Add(time.Second), false)
}

// TestTimeline_Downtimes: a document's timeline lists the times serve was
// down that overlap the range it covers (from since, else its earliest
// event; to next_since when truncated, else until, else now), each with
// the note the page shows, and none outside it (op17: an earlier outage
// that lost spans was told nowhere, and the timeline of its time looked
// as if nothing happened).
func TestTimeline_Downtimes(t *testing.T) {
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Two calls on the document, at t0 and a second later.
	recs := []audit.Record{mkCall(1, "", "thegram", "s-1", t0, "gram_read", "ops/a.gram"),
		mkCall(2, "", "thegram", "s-1", t0.Add(time.Second), "gram_read", "ops/a.gram")}
	if _, err := st.AppendCalls(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	downs := map[string]audit.Downtime{
		"before": {From: t0.Add(-10 * time.Minute), To: t0.Add(-9 * time.Minute), End: audit.EndStop},
		"after":  {From: t0.Add(10 * time.Second), To: t0.Add(20 * time.Second), End: audit.EndCrash},
		"old":    {From: t0.Add(-48 * time.Hour), To: t0.Add(-48*time.Hour + time.Minute), End: audit.EndUnknown},
	}
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	q.Downtimes = func() []audit.Downtime { return []audit.Downtime{downs["old"], downs["before"], downs["after"]} }
	srv := httptest.NewServer(q.Handler())
	defer srv.Close()
	ts := func(d time.Duration) string { return url.QueryEscape(t0.Add(d).Format(time.RFC3339Nano)) }
	f := func(query string, want ...string) {
		t.Helper()
		status, _, body := do(t, "GET", srv.URL+"/api/v1/documents/ops%2Fa.gram/timeline?"+query, "")
		if status != 200 {
			t.Fatalf("%s: status %d: %s", query, status, body)
		}
		var tl api.Timeline
		if err := json.Unmarshal(body, &tl); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range tl.Downtimes {
			for name, w := range downs {
				if d.From.Equal(w.From) && d.To.Equal(w.To) && d.End == w.End && d.Note == api.DowntimeNote(w) {
					got = append(got, name)
				}
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || len(got) != len(tl.Downtimes) {
			t.Errorf("%s: downtimes %v (%s), want %v", query, got, body, want)
		}
	}
	f("", "after")                                     // from the first event to now
	f("since="+ts(-15*time.Minute), "before", "after") // from since
	f("since="+ts(-15*time.Minute)+"&until="+ts(-9*time.Minute-30*time.Second), "before")
	f("since=" + ts(-15*time.Minute) + "&until=" + ts(-10*time.Minute)) // ends as it begins: no overlap
	f("since="+ts(-9*time.Minute), "after")                             // begins as "before" ends: not it
	f("since="+ts(15*time.Second), "after")                             // no event in the range: still told
	f("limit=1")                                                        // truncated: up to next_since, before it
	f("since="+ts(-72*time.Hour)+"&until="+ts(time.Hour), "old", "before", "after")

	want := "serve was down 2026-11-02 09:00:10–09:00:20 UTC (crash): calls sent then by exporters that do not retry may be missing (docs/runbooks.md#after-serve-was-down)"
	if got := api.DowntimeNote(downs["after"]); got != want {
		t.Errorf("note %q, want %q", got, want)
	}
	over := audit.Downtime{From: time.Date(2026, 12, 5, 23, 59, 58, 0, time.UTC), To: time.Date(2026, 12, 6, 0, 0, 3, 0, time.UTC), End: audit.EndStop}
	if got := api.DowntimeNote(over); !strings.HasPrefix(got, "serve was down 2026-12-05 23:59:58–2026-12-06 00:00:03 UTC (stop): ") {
		t.Errorf("note over midnight %q", got)
	}

	// The status lists them all, oldest first, and the last one's end.
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return nil, 0, 0 }
	q.Downtime = func() (time.Time, time.Time) { return downs["after"].From, downs["after"].To }
	out, _ := q.StatusOf("", "", downs["after"].To.Add(time.Minute))
	if len(out.Downtimes) != 3 || !out.Downtimes[0].From.Equal(downs["old"].From) || out.Downtimes[2].End != audit.EndCrash {
		t.Errorf("status downtimes %+v", out.Downtimes)
	}
	if out.LastDowntime == nil || out.LastDowntime.End != audit.EndCrash {
		t.Errorf("last downtime %+v, want its end", out.LastDowntime)
	}
}
