package web

import (
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// TestTimelineDowntimes: a timeline page marks every time serve was down
// that overlaps the time it shows, at its place among the calls (before
// the first call made after it began), with the note of the API, and no
// other; a page of a long timeline marks those of its own stretch (op17:
// the timeline of an outage's time showed no hint that serve was down).
func TestTimelineDowntimes(t *testing.T) {
	base := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	downs := []audit.Downtime{
		{From: base, To: base.Add(20 * time.Second), End: audit.EndCrash},                                   // before the first call (14:01:30)
		{From: base.Add(3 * time.Minute), To: base.Add(3*time.Minute + 4*time.Second), End: audit.EndCrash}, // between 14:02:05 and 14:09:00
		{From: base.Add(20 * time.Minute), To: base.Add(21 * time.Minute), End: audit.EndStop},              // after the last call
	}
	edit := func(q *api.Server) {
		q.Now = func() time.Time { return base.Add(time.Hour) }
		q.Downtimes = func() []audit.Downtime { return downs }
	}
	rowRE := regexp.MustCompile(`<tr class="(?:call|downtime)[^"]*" data-(?:call|from)="([^"]+)"`)
	// rows names the rows of a page in order: a call by the last two
	// digits of its id, a marker by the time it begins.
	rows := func(page string) string {
		var out []string
		for _, m := range rowRE.FindAllStringSubmatch(page, -1) {
			if id, ok := strings.CutPrefix(m[1], "c_"); ok {
				out = append(out, id[len(id)-2:])
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, "down@"+at.Format("15:04:05"))
		}
		return strings.Join(out, " ")
	}
	for _, size := range []int{0, 2} {
		hs := incidentServerAPI(t, Config{PageSize: size}, edit)
		c := client(t)
		f := func(query, want string) {
			t.Helper()
			_, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram"+query, nil)
			if got := rows(page); got != want {
				t.Errorf("page size %d, %q: rows %q, want %q", size, query, got, want)
			}
			n := strings.Count(want, "down@")
			if got := strings.Contains(page, `id="downtime-count"`); got != (n > 0) {
				t.Errorf("page size %d, %q: the note above the calls shown %v, want %v", size, query, got, n > 0)
			}
			for _, d := range downs {
				if strings.Contains(want, "down@"+d.From.Format("15:04:05")) && !strings.Contains(html.UnescapeString(page), api.DowntimeNote(d)) {
					t.Errorf("page size %d, %q: no note %q", size, query, api.DowntimeNote(d))
				}
			}
		}
		if size == 0 {
			f("", "down@14:00:00 11 12 down@14:03:00 13 down@14:20:00")
			f("?since=2026-12-04+14:01&until=2026-12-04+14:05", "11 12 down@14:03:00")
			f("?since=2026-12-04+14:04&until=2026-12-04+14:08", "")
			f("?since=2026-12-04+14:00:10&until=2026-12-04+14:01", "down@14:00:00")
			f("?since=2026-12-04+14:00:20&until=2026-12-04+14:01", "")
			// A session's page marks them alike.
			_, page := body(t, c, "GET", hs.URL+"/sessions/s-incident?until=2026-12-04+14:05", nil)
			if got, want := rows(page), "down@14:00:00 11 12 down@14:03:00"; got != want {
				t.Errorf("session page: rows %q, want %q", got, want)
			}
			continue
		}
		// Two calls a page: the first page ends at 14:02:05, the second
		// holds the marker of 14:03, made before its call, and the last.
		f("", "down@14:00:00 11 12")
		_, page := body(t, c, "GET", hs.URL+"/documents/team%2Fnotes.gram", nil)
		m := regexp.MustCompile(`<a id="next" href="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no next page")
		}
		ref, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		f(ref.String(), "down@14:03:00 13 down@14:20:00")
	}
}

// TestIndexDowntimes: the findings page searched by time lists the
// downtimes in its range, and none without a time filter or outside it.
func TestIndexDowntimes(t *testing.T) {
	base := time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)
	d := audit.Downtime{From: base.Add(3 * time.Minute), To: base.Add(3*time.Minute + 4*time.Second), End: audit.EndCrash}
	hs := incidentServerAPI(t, Config{}, func(q *api.Server) {
		q.Now = func() time.Time { return base.Add(time.Hour) }
		q.Downtimes = func() []audit.Downtime { return []audit.Downtime{d} }
	})
	c := client(t)
	f := func(query string, want bool) {
		t.Helper()
		_, page := body(t, c, "GET", hs.URL+"/"+query, nil)
		if got := strings.Contains(html.UnescapeString(page), api.DowntimeNote(d)); got != want {
			t.Errorf("%q: downtime told %v, want %v", query, got, want)
		}
	}
	f("", false)
	f("?since=2026-12-04+14:00", true)
	f("?since=2026-12-04+14:00&until=2026-12-04+14:03", false)
	f("?until=2026-12-04+14:03:01", true)
	f("?since=2026-12-04+14:03:04", false)
}
