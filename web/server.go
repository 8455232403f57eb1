package web

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/access"
)

//go:embed templates assets
var files embed.FS

// Server renders the page from a store.
type Server struct {
	store  audit.Store
	api    *api.Server
	cfg    Config
	status StatusFunc
	redact redactor
	log    *slog.Logger
	// runbook is the runbook document findings link to; empty: no link.
	runbook string
	// csrfKey signs the forms of this process.
	csrfKey []byte
	views   map[string]*template.Template

	sloMu    sync.Mutex
	sloCache map[sloKey]sloEntry
}

// New returns the page over store, authenticating and reading findings as
// q (the query API) does. status may be nil.
func New(store audit.Store, q *api.Server, cfg Config, status StatusFunc, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid web config: %w", err)
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = NewDefaultConfig().PageSize
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{store: store, api: q, cfg: cfg, status: status, redact: newRedactor(cfg.Redact), log: log,
		csrfKey: make([]byte, 32), views: map[string]*template.Template{}, sloCache: map[sloKey]sloEntry{}}
	rand.Read(s.csrfKey)
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimSuffix(n[len("templates/"):], ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("cannot parse template %s: %w", n, err)
		}
		s.views[base] = t
	}
	return s, nil
}

// LinkRunbook makes each finding's page link to the step for its kind in
// the runbook document u (rules.runbook_url), at KindRunbook. Call it
// before Handler.
func (s *Server) LinkRunbook(u string) { s.runbook = u }

// KindRunbook returns the section of the runbook document u about a
// finding of kind k: the McpAuditFinding alert's step for that kind
// (docs/runbooks.md, "McpAuditFinding <kind>").
func KindRunbook(u string, k audit.Kind) string {
	return u + "#mcpauditfinding-" + string(k)
}

// Handler returns the page's routes: /, /documents/, /sessions/,
// /findings/, /calls/ (the list) and /calls/{id}, /slo, /login, /logout and /assets/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.auth(s.index))
	mux.HandleFunc("GET /documents/{doc...}", s.auth(s.document))
	mux.HandleFunc("GET /sessions/{session...}", s.auth(s.session))
	mux.HandleFunc("GET /findings/{id}", s.auth(s.finding))
	mux.HandleFunc("POST /findings/{id}/{action}", s.auth(s.change))
	mux.HandleFunc("GET /calls/{id}", s.auth(s.call))
	mux.HandleFunc("GET /calls/{$}", s.auth(s.callList))
	mux.HandleFunc("GET /slo", s.auth(s.slo))
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	assets, _ := fs.Sub(files, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	return securityHeaders(mux)
}

// securityHeaders keeps the page to its own assets.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// tokenCookie holds the bearer token of a browser that logged in.
const tokenCookie = "mcpaudit_token"

type principalKey struct{}

// auth resolves the caller's principal from the Authorization header or
// the login cookie, and sends a browser without one to /login. A known
// credential without the query scope is answered 403 with the reason:
// sending it to /login would loop, as it is signed in already.
func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.api.Identify(r)
		if (!ok || !p.Can(access.ScopeQuery)) && s.api.AuthOn() {
			if c, err := r.Cookie(tokenCookie); err == nil {
				if cp, cok := s.api.IdentifyToken(c.Value); cok && (!ok || cp.Can(access.ScopeQuery)) {
					p, ok = cp, true
				}
			}
		}
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcpaudit"`)
			http.Error(w, "missing or unknown token", http.StatusUnauthorized)
			return
		}
		if !p.Can(access.ScopeQuery) {
			s.render(w, r, "error", http.StatusForbidden, http.StatusText(http.StatusForbidden),
				api.NoScope(p)+": the page needs a credential with the query scope; sign in with another at /login")
			return
		}
		if err := access.Conflict(p, r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		// A credential of every tenant, before tenant= narrows it: its
		// pages name the tenant of each row and offer the tenant filter.
		every := s.api.AuthOn() && p.Tenant == ""
		p.Tenant = access.Tenant(p, r)
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		h(w, r.WithContext(context.WithValue(ctx, everyKey{}, every)))
	}
}

type everyKey struct{}

func principal(r *http.Request) api.Principal {
	p, _ := r.Context().Value(principalKey{}).(api.Principal)
	return p
}

// everyTenant reports whether the caller's credential reads every tenant
// ("*"), whether or not tenant= narrows this request. With authentication
// off every call is the empty tenant's, and the page names no tenant.
func everyTenant(r *http.Request) bool {
	every, _ := r.Context().Value(everyKey{}).(bool)
	return every
}

// csrf returns the form token of the caller's credential.
func (s *Server) csrf(r *http.Request) string {
	m := hmac.New(sha256.New, s.csrfKey)
	tok := ""
	if c, err := r.Cookie(tokenCookie); err == nil {
		tok = c.Value
	}
	m.Write([]byte(tok))
	m.Write([]byte{0})
	m.Write([]byte(r.Header.Get("Authorization")))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// page is what every view's template gets.
type page struct {
	Title     string
	Path      string
	Principal api.Principal
	AuthOn    bool
	CSRF      string
	// AllTenants is set for a credential of every tenant ("*"): the
	// findings list offers the tenant filter and links carry the tenant
	// of their row (tenant=), so that a document or session of one name in
	// two tenants opens as the row's. TenantColumn is set when such a
	// credential reads every tenant (no tenant= narrows the request):
	// lists and timelines then name the tenant of each row (op21's D4). A
	// credential of one tenant sees neither: every row is its tenant's.
	AllTenants   bool
	TenantColumn bool
	Status       *Status
	// Hold and HeldBack are the "Restart hold:" and "Held back:" lines of
	// mcpaudit status (api.RestartHold, api.HeldBack) for the caller's
	// tenant, when the pipeline has them.
	Hold     string
	HeldBack []string
	// Behind is the line mcpaudit status prints on the partitions behind
	// (api.BehindLine), the tooltip of the status bar's count of them.
	Behind string
	// OtherStore is mcpaudit status's line on the history another store
	// of the data dir holds (api.OtherStoreLine), shown to a reader of
	// every tenant: after a switch to ClickHouse the page showed none of
	// the embedded store's history and did not say so (op23's D3).
	OtherStore string
	// NoWatermark are the "No watermark yet:" lines (api.NoWatermark):
	// partitions with calls waiting that have not taken a watermark.
	NoWatermark []string
	// Judged is what mcpaudit status says of the caller's tenant after
	// api.JudgedLabel and its pending-write line (api.PendingLine), when
	// the pipeline has them.
	Judged *judgedView
	Error  string
	Data   any
}

// judgedView is the status bar's "judged" and "pending writes": whether
// every call acknowledged so far is judged, and how many judged writes
// are still pending and until when, with mcpaudit status's line on them.
type judgedView struct {
	// Value is what mcpaudit status says after api.JudgedLabel
	// (api.JudgedValue: "yes", "no", or "yes, but for the N stored too
	// late").
	Value   string
	Pending int
	// Until is the event time the last pending write's window ends
	// (api.PendingUntil): comparable with the watermark beside it.
	Until time.Time
	Line  string
	// TooLate and TooLateBefore count the calls stored too late, never
	// judged: since the start, and by the runs before it
	// (api.StatusResponse.TooLateBeforeStart). Shown beside "judged" when
	// any: after a restart "judged: yes" alone hid the earlier runs' (live22's S2).
	TooLate, TooLateBefore int64
}

// statusLines sets the page's status lines from st, the status of its
// principal's tenant.
func (p *page) statusLines(st api.StatusResponse) {
	p.Hold, _ = api.RestartHold(st)
	p.OtherStore, _ = api.OtherStoreLine(st)
	p.Behind, _ = api.BehindLine(st)
	line, _ := api.PendingLine(st)
	p.Judged = &judgedView{Value: api.JudgedValue(st), Pending: st.PendingWrites, Until: api.PendingUntil(st), Line: line,
		TooLate: st.TooLate, TooLateBefore: st.TooLateBeforeStart}
	for _, ps := range st.Partitions {
		if line, ok := api.NoWatermark(ps); ok {
			p.NoWatermark = append(p.NoWatermark, line)
		}
		if line, ok := api.HeldBack(ps); ok {
			p.HeldBack = append(p.HeldBack, line)
		}
	}
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, view string, status int, title string, data any) {
	t := s.views[view]
	p := page{Title: title, Path: r.URL.Path, Principal: principal(r), AuthOn: s.api.AuthOn(), CSRF: s.csrf(r), Data: data}
	p.AllTenants = everyTenant(r)
	p.TenantColumn = p.AllTenants && p.Principal.Tenant == ""
	// The zero principal (no credential yet: the sign-in page) has the
	// empty tenant, which is every tenant: it is shown no status lines and
	// no status bar. Everyone else is shown those of the tenant they read
	// (empty for the "*" credential and with authentication off: every
	// tenant). The lines and the bar are built from one ask of the
	// pipeline (withScope): each ask drains its queue and ticks the
	// engine, and may commit.
	if !p.AuthOn || p.Principal.Authenticated {
		tenant := p.Principal.Tenant
		ctx := withScope(r.Context(), tenant, false, nil)
		if s.api.Status != nil {
			parts, queued, unstored := s.api.Status()
			p.statusLines(s.api.StatusOfParts(parts, queued, unstored, tenant, "", s.api.Now()))
			ctx = withScope(r.Context(), tenant, true, parts)
		}
		if s.status != nil {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			st := s.status(ctx)
			cancel()
			p.Status = &st
		}
	}
	var b strings.Builder
	if err := t.Execute(&b, p); err != nil {
		s.log.Error("cannot render page", "view", view, "err", err)
		http.Error(w, "cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprint(w, visible(b.String()))
}

// fail renders an error page with the status the error calls for.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, audit.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, audit.ErrStateConflict):
		status = http.StatusConflict
	case errors.Is(err, audit.ErrBadCursor), errors.Is(err, errBadParam):
		status = http.StatusBadRequest
	case errors.Is(err, audit.ErrUnavailable):
		status = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "5")
	}
	s.render(w, r, "error", status, http.StatusText(status), err.Error())
}

// errBadParam marks a bad query parameter.
var errBadParam = errors.New("bad parameter")

// parseTime reads a time or a duration back from now (api.ParseTime).
func parseTime(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := api.ParseTime(v, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w %s: %v", errBadParam, name, err)
	}
	return t, nil
}

// row is one line of a timeline: a call and what the store knows about it.
type row struct {
	Call      *audit.Call
	Outcome   audit.Outcome
	Failure   *audit.Failure
	Tool      string
	Documents []string
	Rev       dialect.Revisions
	Writes    []audit.Write
	// Findings are those whose evidence includes the call.
	Findings []audit.Finding
	// Down are the times serve was down that begin before the call and
	// after the row before it (or are the first of the range): their
	// markers come before the call.
	Down []api.Downtime
}

// Evidence reports whether the call is evidence of a finding.
func (r row) Evidence() bool { return len(r.Findings) > 0 }

// timeline is a document's or a session's calls, one page.
type timeline struct {
	Kind string // "document" or "session"
	Name string
	Rows []row
	// Findings are those in the range (since, until) as the calls are,
	// up to 500, newest first; FindingsInRange counts them all and
	// FindingsOutside those before or after the range, which AllFindings
	// (this page without a range) lists.
	Findings        []audit.Finding
	FindingsInRange int64
	FindingsOutside int64
	AllFindings     template.URL
	// Capped is true when FindingsInRange is more than the list holds.
	Capped bool
	// Next is the link to the next page ("?" and its query), empty on the
	// last. A template.URL: html/template escapes a string after "?" as
	// one query component, so "cursor=X" became "cursor%3dX" and the link
	// led back to the first page.
	Next     template.URL
	Since    string
	Until    string
	Payloads bool
	// InQuery is true on the query form of the page (?name=): the range
	// form carries the name, as its submission replaces the query.
	InQuery bool
	// DownAfter are the times serve was down in the range shown after its
	// last call (every one, when no call is shown): their markers end the
	// list. Down counts the markers, those of Rows included.
	DownAfter []api.Downtime
	Down      int
	// Server is the server= the page is narrowed to: a document or
	// session is a server's, and another server may hold one of the same
	// name (two vaults, or two exporters of one). EveryServer is the page
	// without it.
	Server      string
	EveryServer template.URL
	// Servers are, when the page is not narrowed and its calls and
	// findings are of more than one server, those servers, each with the
	// page narrowed to it: each row then names its server (op23's D2: two
	// servers' documents of one path read as duplicates).
	Servers []serverLink
}

// serverLink is a server and the page narrowed to it.
type serverLink struct {
	Name string
	URL  template.URL
}

// ServerColumn reports whether the rows name their server.
func (t *timeline) ServerColumn() bool { return len(t.Servers) > 1 }

// LinkServer is the server a row's links carry (server=), so that they
// open that server's document or session: the row's on a page narrowed
// to a server or of several servers, else none.
func (t *timeline) LinkServer(server string) string {
	if t.Server == "" && !t.ServerColumn() {
		return ""
	}
	return server
}

// withQuery is the page's query with key set to value (deleted when
// empty) and no cursor, as a link: "?" and the query.
func withQuery(q url.Values, key, value string) template.URL {
	return template.URL("?" + querySet(q, key, value).Encode())
}

// querySet returns a copy of q without its cursor (a link to another
// filter starts at the first page) and with key set to value, or deleted
// when value is empty.
func querySet(q url.Values, key, value string) url.Values {
	v := url.Values{}
	for k, x := range q {
		if k != "cursor" {
			v[k] = x
		}
	}
	if value == "" {
		v.Del(key)
	} else {
		v.Set(key, value)
	}
	return v
}

// withParam adds key=value to the link u, after its query if it has one.
func withParam(u, key, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + key + "=" + url.QueryEscape(value)
}

// placeDowntimes puts the markers of ds (oldest first) at their place
// among rows (in time order): before the first call made after the
// downtime began, or after the last call.
func placeDowntimes(rows []row, ds []api.Downtime) (after []api.Downtime) {
	i := 0
	for _, d := range ds {
		for i < len(rows) && !rows[i].Call.Time.After(d.From) {
			i++
		}
		if i == len(rows) {
			after = append(after, d)
			continue
		}
		rows[i].Down = append(rows[i].Down, d)
	}
	return after
}

// shownRange is the range of event time a page of a timeline shows, for
// its downtime markers: from since, or from the first call shown on a
// later page (downtimesBefore adds those that ended between the pages;
// the first page without since from the beginning); to the last call
// shown when a later page follows, else to until, or without it to now.
// A zero bound is open.
func shownRange(calls []audit.Record, since, until, now time.Time, later, more bool) (from, to time.Time) {
	from, to = since, until
	if later && len(calls) > 0 {
		from = calls[0].Call.Time
	}
	switch {
	case more && len(calls) > 0:
		// A downtime that begins at the instant of the last call is
		// told here, after it: the next page begins after that call.
		to = calls[len(calls)-1].Call.Time.Add(1)
	case to.IsZero():
		to = now
	}
	return from, to
}

// downtimesBefore returns, for a later page of a timeline whose first call
// is at first, the downtimes that ended by then after the last call of
// the page before (q selects the timeline's calls): no call of it was
// made from their beginning to first, so their markers come before the
// first call here. Oldest first; one read of the store per downtime told,
// and one more.
func (s *Server) downtimesBefore(ctx context.Context, q audit.CallQuery, first time.Time) ([]api.Downtime, error) {
	ds := s.api.DowntimesIn(time.Time{}, first)
	var out []api.Downtime
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		if d.To.After(first) {
			continue // overlaps the page: told by its range
		}
		q.Since, q.Until, q.Limit, q.Cursor = d.From, first, 1, ""
		p, err := s.store.Calls(ctx, q)
		if err != nil {
			return nil, err
		}
		if len(p.Calls) > 0 {
			break // a call made after it is on an earlier page, and so are the downtimes before it
		}
		out = append(out, d)
	}
	slices.Reverse(out)
	return out, nil
}

// buildTimeline joins a page of calls with their writes and the findings
// they are evidence of.
func (s *Server) buildTimeline(ctx context.Context, tenant, server string, calls []audit.Record, doc, session string, findings []audit.Finding) ([]row, error) {
	rows := make([]row, len(calls))
	byID := map[string]int{}
	for i := range calls {
		c := &calls[i]
		rows[i] = row{Call: c.Call, Outcome: c.Outcome, Failure: c.Failure, Tool: c.Tool, Documents: c.Documents()}
		d := doc
		if d == "" && len(c.Documents()) > 0 {
			d = c.Documents()[0]
		}
		rows[i].Rev = dialect.RevisionsOf(c.Call, d)
		byID[c.Call.ID] = i
	}
	if len(calls) > 0 {
		wq := audit.WriteQuery{Tenant: tenant, Server: server, Document: doc, Session: session,
			Since: calls[0].Call.Time, Until: calls[len(calls)-1].Call.Time.Add(1), Limit: 1000}
		for {
			p, err := s.store.Writes(ctx, wq)
			if err != nil {
				return nil, err
			}
			for _, w := range p.Writes {
				if i, ok := byID[w.CallID]; ok {
					rows[i].Writes = append(rows[i].Writes, w)
				}
			}
			if p.NextCursor == "" {
				break
			}
			wq.Cursor = p.NextCursor
		}
	}
	for _, f := range findings {
		for _, id := range f.Calls {
			if i, ok := byID[id]; ok {
				rows[i].Findings = append(rows[i].Findings, f)
			}
		}
	}
	return rows, nil
}

// countFindings counts the findings of q, in every state.
func (s *Server) countFindings(ctx context.Context, q audit.FindingQuery) (int64, error) {
	counts, err := s.store.FindingCounts(ctx, q)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		n += c.Count
	}
	return n, nil
}

// rangeFindings returns the findings of q in [since, until) (a zero bound
// is open), newest first, how many q selects in all and how many in the
// range. every is allFindings(q): when it holds them all, they are taken
// from it, without reading the store again.
func (s *Server) rangeFindings(ctx context.Context, q audit.FindingQuery, every []audit.Finding, since, until time.Time) (in []audit.Finding, all, inRange int64, err error) {
	if len(every) < findingsListed {
		for _, f := range every {
			if (since.IsZero() || !f.Time.Before(since)) && (until.IsZero() || f.Time.Before(until)) {
				in = append(in, f)
			}
		}
		return in, int64(len(every)), int64(len(in)), nil
	}
	if all, err = s.countFindings(ctx, q); err != nil {
		return nil, 0, 0, err
	}
	if since.IsZero() && until.IsZero() {
		return every, all, all, nil
	}
	q.Since, q.Until = since, until
	if in, err = s.allFindings(ctx, q); err != nil {
		return nil, 0, 0, err
	}
	if inRange, err = s.countFindings(ctx, q); err != nil {
		return nil, 0, 0, err
	}
	return in, all, inRange, nil
}

// findingsListed is how many findings a timeline lists at most.
const findingsListed = 500

// allFindings reads up to findingsListed findings of q, newest first.
func (s *Server) allFindings(ctx context.Context, q audit.FindingQuery) ([]audit.Finding, error) {
	q.Limit, q.Newest = findingsListed, true
	p, err := s.store.Findings(ctx, q)
	if err != nil {
		return nil, err
	}
	return p.Findings, nil
}

func (s *Server) timelineView(w http.ResponseWriter, r *http.Request, kind, name string) {
	if name == "" {
		s.fail(w, r, fmt.Errorf("%w: no %s named (in the path, or as ?name=, which a name such as \"..\" needs: a browser resolves it in a path)", errBadParam, kind))
		return
	}
	p := principal(r)
	now := s.api.Now()
	qv := r.URL.Query()
	since, err := parseTime("since", qv.Get("since"), now)
	if err == nil {
		var until time.Time
		until, err = parseTime("until", qv.Get("until"), now)
		if err == nil {
			if err = api.CheckRange(since, until); err == nil {
				s.renderTimeline(w, r, p, kind, name, since, until)
				return
			}
			err = fmt.Errorf("%w: %w", errBadParam, err)
		}
	}
	s.fail(w, r, err)
}

func (s *Server) renderTimeline(w http.ResponseWriter, r *http.Request, p api.Principal, kind, name string, since, until time.Time) {
	ctx := r.Context()
	server := r.URL.Query().Get("server")
	cq := audit.CallQuery{Tenant: p.Tenant, Server: server, Since: since, Until: until, Limit: s.cfg.PageSize, Cursor: r.URL.Query().Get("cursor")}
	fq := audit.FindingQuery{Tenant: p.Tenant, Server: server}
	var doc, session string
	if kind == "document" {
		cq.Document, fq.Document, doc = name, name, name
	} else {
		cq.Session, fq.Session, session = name, name, name
	}
	page, err := s.store.Calls(ctx, cq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The list follows the range as the calls do; the calls shown are
	// marked with every finding they are evidence of, in the range or not
	// (a finding is dated by its first evidence call, and a later one may
	// be in the range when the first is not).
	evidence, err := s.allFindings(ctx, fq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	findings, all, inRange, err := s.rangeFindings(ctx, fq, evidence, since, until)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(page.Calls) == 0 && all == 0 {
		// An empty page is "nothing in this range" only for a name the
		// store knows: a mistyped or unknown one says so.
		known, err := s.store.Calls(ctx, audit.CallQuery{Tenant: p.Tenant, Server: server, Document: cq.Document, Session: cq.Session, Limit: 1})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if len(known.Calls) == 0 {
			on := ""
			if server != "" {
				on = fmt.Sprintf(" on server %q", server)
			}
			s.fail(w, r, fmt.Errorf("%s %q%s: no stored call or finding names it (names must match exactly; the findings page filters by document and session): %w",
				kind, name, on, audit.ErrNotFound))
			return
		}
	}
	if kind == "document" {
		// Evidence on this document of findings filed under another
		// (a duplicate create names the later document).
		slices.SortFunc(findings, func(a, b audit.Finding) int { return a.Time.Compare(b.Time) })
		slices.SortFunc(evidence, func(a, b audit.Finding) int { return a.Time.Compare(b.Time) })
	}
	rows, err := s.buildTimeline(ctx, p.Tenant, server, page.Calls, doc, session, evidence)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	from, to := shownRange(page.Calls, since, until, s.api.Now(), cq.Cursor != "", page.NextCursor != "")
	downs := s.api.DowntimesIn(from, to)
	if cq.Cursor != "" && len(page.Calls) > 0 {
		before, err := s.downtimesBefore(ctx, cq, page.Calls[0].Call.Time)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		downs = append(before, downs...)
	}
	tl := timeline{Kind: kind, Name: name, Rows: rows, Findings: findings, Payloads: !s.cfg.HidePayloads,
		DownAfter: placeDowntimes(rows, downs), Down: len(downs),
		Since: r.URL.Query().Get("since"), Until: r.URL.Query().Get("until"),
		FindingsInRange: inRange, FindingsOutside: all - inRange, Capped: int64(len(findings)) < inRange,
		InQuery: r.PathValue(pathKey[kind]) == "", Server: server}
	if server != "" {
		tl.EveryServer = withQuery(r.URL.Query(), "server", "")
	} else {
		// The servers of the calls shown and of the findings (those the
		// calls are evidence of, up to findingsListed).
		var names []string
		for _, c := range page.Calls {
			names = append(names, c.Call.Server)
		}
		for _, f := range evidence {
			names = append(names, f.Server)
		}
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			tl.Servers = append(tl.Servers, serverLink{n, withQuery(r.URL.Query(), "server", n)})
		}
	}
	if tl.FindingsOutside > 0 {
		v := url.Values{}
		for k, x := range r.URL.Query() {
			if k != "since" && k != "until" && k != "cursor" {
				v[k] = x
			}
		}
		tl.AllFindings = template.URL("?" + v.Encode())
	}
	if page.NextCursor != "" {
		v := url.Values{}
		for k, x := range r.URL.Query() {
			v[k] = x
		}
		v.Set("cursor", page.NextCursor)
		tl.Next = template.URL("?" + v.Encode())
	}
	title := "Document " + name
	if kind == "session" {
		title = "Session " + name
	}
	s.render(w, r, "timeline", http.StatusOK, title, &tl)
}

func (s *Server) document(w http.ResponseWriter, r *http.Request) {
	s.timelineView(w, r, "document", timelineName(r, "document"))
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	s.timelineView(w, r, "session", timelineName(r, "session"))
}

// pathKey is the path wildcard of each timeline's route.
var pathKey = map[string]string{"document": "doc", "session": "session"}

// timelineName is the document or session a timeline shows: the path's
// name (/documents/NAME), or on the query form (/documents/?name=NAME)
// the query's.
func timelineName(r *http.Request, kind string) string {
	if n := r.PathValue(pathKey[kind]); n != "" {
		return n
	}
	return r.URL.Query().Get("name")
}

// nameURL is the page of a document or session under prefix ("/documents/"
// or "/sessions/"): the name escaped as one path segment, or the query form
// prefix?name=NAME for "." and "..". A browser resolves those dot segments
// before it sends the request, %2E and %2E%2E included (the URL standard),
// so escaping cannot keep them: /sessions/.. would open the findings list.
// Any other name is one segment once escaped ("/" is %2F, "%" is %25), and
// the router cleans the escaped path, so "a/.." (a%2F..) stays as it is.
func nameURL(prefix, name string) string {
	if name == "" || name == "." || name == ".." {
		return prefix + "?name=" + url.QueryEscape(name)
	}
	return prefix + url.PathEscape(name)
}

// callView is the raw payload of one call.
type callView struct {
	Call                  *audit.Call
	Outcome               audit.Outcome
	Failure               *audit.Failure
	Documents             []string
	Arguments, Result     string
	ErrorData             string
	Hidden, Redacted      bool
	Fragment              bool
	Writes                []audit.Write
	FindingIDs            []string
	Rev                   dialect.Revisions
	ArgumentsN, ResultN   int
	TransportError        string
	ErrorCode             int64
	ErrorMessage          string
	HasError, HasResponse bool
}

func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	page, err := s.store.Calls(r.Context(), audit.CallQuery{IDs: []string{r.PathValue("id")}, Tenant: p.Tenant})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(page.Calls) == 0 {
		s.fail(w, r, fmt.Errorf("call %s: %w", r.PathValue("id"), audit.ErrNotFound))
		return
	}
	c := page.Calls[0]
	v := callView{Call: c.Call, Outcome: c.Outcome, Failure: c.Failure, Documents: c.Documents(),
		Hidden: s.cfg.HidePayloads, Redacted: len(s.redact) > 0, Fragment: r.URL.Query().Get("fragment") == "1",
		ArgumentsN: len(c.Call.Arguments), ResultN: len(c.Call.Result), TransportError: c.Call.TransportError,
		HasResponse: c.Call.Responded}
	if len(c.Documents()) > 0 {
		v.Rev = dialect.RevisionsOf(c.Call, c.Documents()[0])
	}
	if c.Call.Error != nil {
		v.HasError, v.ErrorCode, v.ErrorMessage = true, c.Call.Error.Code, c.Call.Error.Message
	}
	if !s.cfg.HidePayloads {
		v.Arguments, v.Result = s.redact.show(c.Call.Arguments), s.redact.show(c.Call.Result)
		if c.Call.Error != nil {
			v.ErrorData = s.redact.show(c.Call.Error.Data)
		}
	}
	if v.Fragment {
		t := s.views["call"]
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		var b strings.Builder
		if err := t.ExecuteTemplate(&b, "payload", &v); err != nil {
			s.log.Error("cannot render payload", "err", err)
			http.Error(w, "cannot render the payload: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, visible(b.String()))
		return
	}
	s.render(w, r, "call", http.StatusOK, "Call "+c.Call.ID, &v)
}

// indexView is the findings list.
type indexView struct {
	Filters  url.Values
	Findings []audit.Finding
	Counts   []kindCount
	Total    int64
	Next     template.URL // as timeline.Next
	Kinds    []audit.Kind
	States   []audit.FindingState
	SLI      *float64
	Target   float64
	Budget   *float64
	Counted  int64
	// Downtimes are the times serve was down in the range of a search by
	// time (since or until set; until now without until): findings about
	// calls made then may be missing.
	Downtimes []api.Downtime
	// Withdrawn is set when the page asks for state=withdrawn: the counts
	// are of withdrawn findings, in a column of their own.
	Withdrawn bool
	// ServerLinks is set when the list is filtered by server or its
	// findings are of more than one server: a row's document and session
	// links then carry its server (server=), so that they open that
	// server's and not every server's of that name.
	ServerLinks bool
}

// LinkServer is the server a row's links carry: its own when ServerLinks.
func (v *indexView) LinkServer(server string) string {
	if !v.ServerLinks {
		return ""
	}
	return server
}

type kindCount struct {
	Kind                         audit.Kind
	Severity                     audit.Severity
	Open, Acknowledged, Resolved int64
	// Withdrawn counts, on a page asked for state=withdrawn only, the
	// findings the collector withdrew.
	Withdrawn int64
	Total     int64
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	q, err := s.api.FindingQueryOf(r, p.Tenant)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w: %w", errBadParam, err))
		return
	}
	q.Newest = true
	if q.Limit == 0 {
		q.Limit = s.cfg.PageSize
	}
	ctx := r.Context()
	page, err := s.store.Findings(ctx, q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	cq := q
	cq.Kind, cq.Cursor = "", ""
	counts, err := s.store.FindingCounts(ctx, cq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := indexView{Filters: r.URL.Query(), Findings: page.Findings, Kinds: audit.Kinds, States: audit.FindingStates,
		Target: s.api.SLOTarget, Withdrawn: q.State == audit.FindingWithdrawn}
	v.ServerLinks = q.Server != "" || slices.ContainsFunc(page.Findings, func(f audit.Finding) bool { return f.Server != page.Findings[0].Server })
	byKind := map[audit.Kind]*kindCount{}
	for _, c := range counts {
		if c.State == audit.FindingWithdrawn && !v.Withdrawn {
			continue // no kind's count: the collector took it back
		}
		k := byKind[c.Kind]
		if k == nil {
			k = &kindCount{Kind: c.Kind, Severity: c.Kind.Severity()}
			byKind[c.Kind] = k
		}
		switch c.State {
		case audit.FindingAcknowledged:
			k.Acknowledged += c.Count
		case audit.FindingResolved:
			k.Resolved += c.Count
		case audit.FindingWithdrawn:
			k.Withdrawn += c.Count
		default:
			k.Open += c.Count
		}
		k.Total += c.Count
		// The table counts every kind, so that the others stay one
		// click away; "findings matching" is what the filter matches.
		if q.Kind == "" || c.Kind == q.Kind {
			v.Total += c.Count
		}
	}
	for _, k := range audit.Kinds {
		if c := byKind[k]; c != nil {
			v.Counts = append(v.Counts, *c)
		}
	}
	// The SLI over the SLO's 30-day window.
	now := s.api.Now()
	wc, err := s.store.WriteCounts(ctx, audit.CountQuery{Tenant: p.Tenant, Server: q.Server, Since: now.Add(-30 * 24 * time.Hour), Until: now})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v.SLI, v.Budget = api.ComputeSLO(wc, s.api.SLOTarget)
	if !q.Since.IsZero() || !q.Until.IsZero() {
		to := q.Until
		if to.IsZero() {
			to = now
		}
		v.Downtimes = s.api.DowntimesIn(q.Since, to)
	}
	v.Counted = wc[audit.StateDurable] + wc[audit.StateResolved] + wc[audit.StateUnverified] + wc[audit.StateDoubleApplied]
	if page.NextCursor != "" {
		nv := url.Values{}
		for k, x := range r.URL.Query() {
			nv[k] = x
		}
		nv.Set("cursor", page.NextCursor)
		v.Next = template.URL("/?" + nv.Encode())
	}
	s.render(w, r, "index", http.StatusOK, "Findings", &v)
}

// findingView is one finding.
type findingView struct {
	Finding  audit.Finding
	History  []audit.FindingChange
	Evidence []row
	Step     *Step
	KindStep string
	// StepWasClients is set when Step is what the client should have
	// done after its uncertain call, not a step to take now.
	StepWasClients bool
	// Runbook is the runbook's step for the finding's kind; empty when no
	// runbook is linked.
	Runbook string
	Actions []string
}

func (s *Server) finding(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	d, err := s.api.Detail(r, r.PathValue("id"), p.Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := d.Finding
	// The evidence is the finding's tenant's: a call id is not the
	// tenant's (an exchange two tenants posted is stored for each), and a
	// reader of every tenant was shown both copies, and both tenants'
	// writes on the document.
	calls, err := s.store.Calls(r.Context(), audit.CallQuery{IDs: f.Calls, Tenant: f.Tenant})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows, err := s.buildTimeline(r.Context(), f.Tenant, f.Server, calls.Calls, f.Document, "", []audit.Finding{f})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := findingView{Finding: f, History: d.History, Evidence: rows, KindStep: KindStep(f), StepWasClients: StepWasClients(f.Kind)}
	if s.runbook != "" {
		v.Runbook = KindRunbook(s.runbook, f.Kind)
	}
	action := f.RetryAction
	if action == "" {
		for _, row := range rows {
			if row.Failure != nil {
				action = row.Failure.Action
				break
			}
		}
	}
	if st, ok := Steps[action]; ok && action != "" {
		v.Step = &st
		v.Finding.RetryAction = action
	}
	switch f.StateOf() {
	case audit.FindingWithdrawn:
		v.Actions = nil // the collector's change, final (409 for a person)
	case audit.FindingResolved:
		v.Actions = []string{"reopen"}
	default:
		v.Actions = []string{"ack", "resolve"}
	}
	s.render(w, r, "finding", http.StatusOK, string(f.Kind)+" "+f.ID(), &v)
}

func (s *Server) change(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, fmt.Errorf("%w: %w", errBadParam, err))
		return
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf(r))) {
		http.Error(w, "the form is stale or was not made by this page: reload and try again", http.StatusForbidden)
		return
	}
	state, ok := api.Actions[r.PathValue("action")]
	if !ok {
		s.fail(w, r, fmt.Errorf("%w: unknown action %q", errBadParam, r.PathValue("action")))
		return
	}
	id := r.PathValue("id")
	_, err := s.api.Change(r, p, id, state, api.ChangeRequest{Note: r.PostFormValue("note"), By: r.PostFormValue("by")})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, "/findings/"+url.PathEscape(id), http.StatusSeeOther)
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, "login", http.StatusOK, "Sign in", r.URL.Query().Get("next"))
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := localNext(r.PostFormValue("next"))
	p, ok := s.api.IdentifyToken(tok)
	if !ok {
		s.render(w, r, "login", http.StatusUnauthorized, "Sign in", next)
		return
	}
	if !p.Can(access.ScopeQuery) {
		// Signed in, it would be refused on every page: say so now.
		s.render(w, r, "error", http.StatusForbidden, http.StatusText(http.StatusForbidden),
			api.NoScope(p)+": the page needs a credential with the query scope")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// localNext returns next when it is a path of this server, else "/". A
// browser reads a backslash as a slash and drops tabs and newlines inside
// a URL, so `/\evil.example` and "/<tab>/evil.example" are //evil.example,
// another site: a link to /login?next=... must not send the one who signs
// in there.
func localNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsRune(next, '\\') || strings.ContainsFunc(next, unicode.IsControl) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return next
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// sortByTime orders findings oldest first.
func sortByTime(fs []audit.Finding) {
	slices.SortFunc(fs, func(a, b audit.Finding) int { return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.ID(), b.ID())) })
}
