package web

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/mcpaudit/mcpaudit/report"
)

// sloWindow is the SLI over one window.
type sloWindow struct {
	Name    string
	Counts  map[audit.WriteState]int64
	SLI     *float64
	Budget  *float64
	Bad     int64
	Counted int64
}

// sloView is the /slo page.
type sloView struct {
	Until     time.Time
	Target    float64
	Windows   []sloWindow
	Report    *report.Report
	BurnDown  template.HTML
	Days      template.HTML
	Watermark time.Time
	Server    string
	// LatestLink anchors the page at the watermark when the window ending
	// now holds no write (a replayed capture).
	LatestLink string
	// StoredLink ends the page at the last stored write when the 30 days
	// shown hold no write (the report's Stored says where they lie).
	StoredLink string
	// DocServers is set when the top documents are of more than one
	// server: each row then names its server (a document is a server's;
	// two servers' documents of one path are two rows, op23's D2).
	DocServers bool
}

// sloWindows are the windows the page shows, the last one the SLO's.
var sloWindows = []struct {
	name string
	d    time.Duration
}{{"1h", time.Hour}, {"1d", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}}

func (s *Server) slo(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	ctx := r.Context()
	qv := r.URL.Query()
	until, err := parseTime("until", qv.Get("until"), s.api.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if until.IsZero() {
		until = s.api.Now()
	}
	server := qv.Get("server")
	v := sloView{Until: until.UTC(), Target: s.api.SLOTarget, Server: server}
	for _, win := range sloWindows {
		c, err := s.store.WriteCounts(ctx, audit.CountQuery{Tenant: p.Tenant, Server: server, Since: until.Add(-win.d), Until: until})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		sw := sloWindow{Name: win.name, Counts: c, Bad: report.Bad(c), Counted: report.Counted(c)}
		sw.SLI, sw.Budget = api.ComputeSLO(c, s.api.SLOTarget)
		v.Windows = append(v.Windows, sw)
	}
	rep, err := s.sloReport(ctx, report.Query{Window: 30 * 24 * time.Hour, WindowName: "30d", Until: until,
		Tenant: p.Tenant, Server: server, Target: s.api.SLOTarget, SkipFailures: true}, qv.Get("until") == "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.Report = rep
	for _, d := range rep.ByDocument {
		if d.Server != rep.ByDocument[0].Server {
			v.DocServers = true
		}
	}
	start := rep.Since
	if len(rep.Days) > 0 {
		start = rep.Days[0].Start
	}
	if st := rep.Stored; st != nil {
		q := url.Values{"until": {st.Until}}
		if server != "" {
			q.Set("server", server)
		}
		v.StoredLink = "/slo?" + q.Encode()
	}
	v.BurnDown = report.BurnDownSVG(rep.BurnDown, start, rep.Until)
	v.Days = report.DaysSVG(rep.Days)
	if wm, err := s.store.Watermark(ctx); err == nil && !wm.IsZero() {
		v.Watermark = wm
		if v.Windows[len(v.Windows)-1].Counted == 0 && wm.Before(until) {
			q := url.Values{"until": {wm.UTC().Format(time.RFC3339Nano)}}
			if server != "" {
				q.Set("server", server)
			}
			v.LatestLink = "/slo?" + q.Encode()
		}
	}
	s.render(w, r, "slo", http.StatusOK, "Write durability SLO", &v)
}

// sloCacheFor is how long the /slo view reuses a 30-day report that ends
// now: the embedded store reads the call of every bad write of the window
// for its client, and people reload it.
const sloCacheFor = 15 * time.Second

type sloKey struct{ tenant, server string }

type sloEntry struct {
	at  time.Time
	rep *report.Report
}

// sloReport builds the report of q, or reuses one built for the same
// tenant and server less than sloCacheFor ago when q ends now.
func (s *Server) sloReport(ctx context.Context, q report.Query, endsNow bool) (*report.Report, error) {
	k := sloKey{q.Tenant, q.Server}
	if endsNow {
		s.sloMu.Lock()
		e, ok := s.sloCache[k]
		s.sloMu.Unlock()
		if ok && time.Since(e.at) < sloCacheFor {
			return e.rep, nil
		}
	}
	rep, err := report.Build(ctx, s.store, q)
	if err != nil || !endsNow {
		return rep, err
	}
	s.sloMu.Lock()
	defer s.sloMu.Unlock()
	if len(s.sloCache) > 256 {
		clear(s.sloCache)
	}
	s.sloCache[k] = sloEntry{time.Now(), rep}
	return rep, nil
}

// funcs are the templates' helpers.
// nameShown is how many characters of a document name a list shows.
const nameShown = 60

// short returns s cut to n characters, the last an ellipsis when cut.
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

var funcs = template.FuncMap{
	// code is a failure's code as shown beside its outcome: what
	// no_response means rather than its name again (classify.CodeText).
	"code": classify.CodeText,
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05.000")
	},
	"rfc":  func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"f4":   func(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) },
	"pct":  report.Percent,
	"left": report.BudgetLeft,
	"deref": func(f *float64) float64 {
		if f == nil {
			return 0
		}
		return *f
	},
	"rate": func(f float64) string {
		if f < 0 {
			return "n/a"
		}
		return strconv.FormatFloat(f, 'f', 1, 64) + " calls/s"
	},
	"lag": func(d time.Duration) string {
		if d < 0 {
			return "n/a"
		}
		return d.Round(time.Millisecond).String()
	},
	"behind": func(n int) string {
		if n < 0 {
			return "n/a"
		}
		return strconv.Itoa(n)
	},
	// docURL and sessionURL escape the name as one path segment
	// (Thegram paths hold slashes), or put it in the query where that
	// path would be rewritten (see nameURL).
	"docURL":     func(d string) string { return nameURL("/documents/", d) },
	"sessionURL": func(s string) string { return nameURL("/sessions/", s) },
	"findingURL": func(f audit.Finding) string { return "/findings/" + f.ID() },
	"callURL":    func(id string) string { return "/calls/" + url.PathEscape(id) },
	// in adds tenant= to a link of the page (a document's, a session's, a
	// call's) for a credential of every tenant (all), so that it opens
	// the row's tenant's and not every tenant's of that name; nothing for
	// the empty tenant or another credential.
	"in": func(all bool, tenant, u string) string {
		if !all || tenant == "" {
			return u
		}
		return withParam(u, "tenant", tenant)
	},
	// on adds server= to a link of the page (a document's, a session's)
	// so that it opens that server's: a document or session is a
	// server's, and another server may hold one of the same name. Nothing
	// for the empty server.
	"on": func(server, u string) string {
		if server == "" {
			return u
		}
		return withParam(u, "server", server)
	},
	// ranged adds the list's since and until to a link to a timeline
	// (its "Every call of" links), which reads them as the list does: a
	// list narrowed to an hour of a document opened its whole history
	// (op46).
	"ranged": func(v url.Values, u string) string {
		for _, k := range []string{"since", "until"} {
			if x := v.Get(k); x != "" {
				u = withParam(u, k, x)
			}
		}
		return u
	},
	"filterURL": func(v url.Values, key, value string) string {
		n := querySet(v, key, value)
		if len(n) == 0 {
			return "/"
		}
		return "/?" + n.Encode()
	},
	"around": func(f audit.Finding) string {
		// The document's timeline from a little before the first evidence.
		return withParam(nameURL("/documents/", f.Document), "since", f.Time.Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	},
	"states":   func() []audit.WriteState { return audit.WriteStates },
	"stateOf":  func(f audit.Finding) audit.FindingState { return f.StateOf() },
	"step":     func(a audit.RetryAction) Step { return Steps[a] },
	"kindStep": func(k audit.Kind) string { return KindSteps[k] },
	"join":     strings.Join,
	"short":    short,
	// name is a document name as a list shows it: cut at nameShown
	// characters (the full name is the cell's title, and on the
	// document's and the finding's page); listSummary is a finding's
	// summary with its document name cut so. A 2,200-byte name shown in
	// full took a screen per row (op20's D5).
	"name": func(s string) string { return short(s, nameShown) },
	"listSummary": func(f audit.Finding) string {
		if f.Document == "" || utf8.RuneCountInString(f.Document) <= nameShown {
			return f.Summary
		}
		return strings.ReplaceAll(f.Summary, f.Document, short(f.Document, nameShown))
	},
	"kinds": func(fs []audit.Finding) string {
		var k []string
		for _, f := range fs {
			k = append(k, string(f.Kind))
		}
		return strings.Join(k, " ")
	},
	"verb": func(a string) string {
		switch a {
		case "ack":
			return "Acknowledge"
		case "resolve":
			return "Resolve"
		case "reopen":
			return "Reopen"
		}
		return a
	},
	"dur": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"count": func(m map[audit.WriteState]int64, s audit.WriteState) int64 {
		return m[s]
	},
	// beforeAfter shows a call's revision or hash as mcpaudit timeline
	// does: "before → after", "—" for a side its payloads do not tell (a
	// read has no before, a call without an answer no after), "—" alone
	// when neither is told.
	"beforeAfter": func(before, after string) string {
		if before == "" && after == "" {
			return "—"
		}
		return cmp.Or(before, "—") + " → " + cmp.Or(after, "—")
	},
	"judgedLabel": func() string { return api.JudgedLabel },
	"formula":     func() string { return report.Formula },
	"sprint":      fmt.Sprint,
	"split":       strings.Fields,
}
