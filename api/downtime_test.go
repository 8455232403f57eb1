package api_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
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
