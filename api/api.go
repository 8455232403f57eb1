// Package api serves the query API of mcpaudit serve: findings, stored
// calls, a document's timeline, write attempts and the write-durability
// SLO, as JSON (docs/api.md). It reads through audit.Store, so it answers
// the same on every backend.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/store"
	"github.com/mcpaudit/mcpaudit/internal/access"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

// Server answers queries from a store.
type Server struct {
	store audit.Store
	// SLOTarget is the write-durability objective the error budget is
	// measured against. Default 0.999.
	SLOTarget float64
	// Tenants maps bearer tokens to tenants; when set, every query is
	// limited to the caller's tenant. Such a token is named after its
	// tenant in the finding lifecycle's audit trail.
	Tenants map[string]string
	// Credentials are named tokens (the name is the key), each for one
	// tenant or, with tenant "*", for every tenant. With Tenants, they
	// turn authentication on.
	Credentials map[string]Credential
	// Now is the clock for relative times (tests set it).
	Now func() time.Time
	// PageTimeout bounds the writing of one page of a streamed answer
	// (/api/v1/calls/export): each page moves the response's write
	// deadline this far ahead, so that an export as long as the store is
	// large is not cut by the listener's write timeout, while a reader
	// that stalls still is. serve sets serve.connections.write_timeout.
	// Default DefaultPageTimeout.
	PageTimeout time.Duration
	// MaxExports caps the exports (/api/v1/calls/export) streamed at
	// once: each holds a page of the store (1000 decoded calls) for as
	// long as its reader takes to read it, up to PageTimeout, so that
	// stalled readers would otherwise hold serve's memory. An export past
	// it is answered 429 with Retry-After. serve sets
	// serve.connections.max_exports. Default DefaultMaxExports.
	MaxExports int
	// Log receives rate-limited lines about refused requests (failed
	// authentication). Nil logs nothing.
	Log *ratelog.Logger
	// Status, if set, gives the pipeline's event-time status for
	// /api/v1/status.
	Status StatusSource
	// Freed, if set, gives the counts of the partitions freed as idle
	// since the start (pipeline.Pipeline.Freed), which /api/v1/status adds
	// to its totals (AddFreed).
	Freed func() []detect.PartitionStatus
	// Downtime, if set, gives the time the collector was down before it
	// started (zero times when unknown), for /api/v1/status.
	Downtime func() (from, to time.Time)
	// Downtimes, if set, gives the times the collector was down that it
	// keeps, oldest first, for /api/v1/status and the timelines.
	Downtimes func() []audit.Downtime
	// WithdrawalsWaiting, if set, counts the withdrawals of stored
	// findings the store refused and that are retried at every commit, of
	// tenant (empty: every tenant): pipeline.Pipeline.WithdrawalsWaiting.
	WithdrawalsWaiting func(tenant string) int
	// TooLateBeforeStart, if set, counts the calls of tenant (empty: every
	// tenant) the store held as too late to be judged when serve started
	// (StatusResponse.TooLateBeforeStart).
	TooLateBeforeStart func(tenant string) int64
	// OtherStore, if set, is the history another store of the data dir
	// holds, told by /api/v1/status (StatusResponse.OtherStore).
	OtherStore *OtherStore
	// StateFile, if set, is what the start found wrong with the state
	// file, told by /api/v1/status (StatusResponse.StateFile).
	StateFile *StateFileStatus
	// Access, if set, authenticates requests (serve shares it with the
	// receivers and /metrics); otherwise Tenants and Credentials do.
	Access *access.Authenticator

	authOnce sync.Once
	built    *access.Authenticator

	// streamsOnce makes streamsStop, which StopStreams closes once
	// (stopOnce).
	streamsOnce, stopOnce sync.Once
	streamsStop           chan struct{}

	// exports holds a token per export under way (MaxExports), made
	// once (exportsOnce).
	exportsOnce sync.Once
	exports     chan struct{}
}

// stopStreams returns the channel StopStreams closes.
func (s *Server) stopStreams() chan struct{} {
	s.streamsOnce.Do(func() { s.streamsStop = make(chan struct{}) })
	return s.streamsStop
}

// StopStreams breaks off every streamed answer (/api/v1/calls/export) under
// way or to come, as a store failure does: the connection is aborted, so
// that the client reads a body that breaks off. serve calls it as it stops:
// an export is as long as the store is large, and its reader may read
// slowly, so that http.Server.Shutdown would otherwise wait out its stop
// budget for it, and the detector's last commit would not be made. Safe to
// call more than once and from any goroutine.
func (s *Server) StopStreams() {
	s.stopOnce.Do(func() { close(s.stopStreams()) })
}

// New returns a query server over store.
func New(store audit.Store, sloTarget float64) *Server {
	return &Server{store: store, SLOTarget: sloTarget, Now: time.Now}
}

// Handler returns the HTTP handler of /api/v1/. Every error, an unknown
// path (404) and a wrong method (405) included, is answered as Error.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/findings", s.findings)
	mux.HandleFunc("GET /api/v1/writes", s.writes)
	mux.HandleFunc("GET /api/v1/slo", s.slo)
	mux.HandleFunc("GET /api/v1/documents/", s.timeline)
	mux.HandleFunc("GET /api/v1/documents/timeline", s.timelineByName)
	mux.HandleFunc("GET /api/v1/findings/counts", s.findingCounts)
	mux.HandleFunc("GET /api/v1/findings/{id}", s.finding)
	mux.HandleFunc("POST /api/v1/findings/{id}/{action}", s.changeFinding)
	mux.HandleFunc("GET /api/v1/status", s.status)
	mux.HandleFunc("GET /api/v1/calls", s.calls)
	mux.HandleFunc("GET /api/v1/calls/{id}", s.call)
	mux.HandleFunc("GET /api/v1/calls/export", s.callsExport)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: the mux answers 404, or 405 with Allow; keep its status
		// and headers, and say it in JSON.
		rec := &statusRecorder{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch rec.status {
		case http.StatusMethodNotAllowed:
			NotAllowed(w, r, rec.header.Get("Allow"))
		default:
			writeJSON(w, http.StatusNotFound, Error{fmt.Sprintf("no endpoint %s; see docs/api.md for the endpoints of API version %s", r.URL.Path, Version)})
		}
	})
}

// NotAllowed answers a method an endpoint does not take: 405, with Allow
// naming those it does, and the error as JSON.
func NotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	writeJSON(w, http.StatusMethodNotAllowed, Error{fmt.Sprintf("method %s not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)})
}

// Version is the version of the API's schema (docs/api.md). Additive
// changes (a new field, endpoint or parameter) keep it; a change that can
// break a client (a field renamed, removed or retyped) moves the paths to
// /api/v2/.
const Version = "v1"

// statusRecorder keeps the status and headers of a response and drops its
// body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var pe *paramError
	switch {
	case errors.As(err, &pe), errors.Is(err, audit.ErrBadCursor):
		writeJSON(w, http.StatusBadRequest, Error{err.Error()})
	case errors.Is(err, audit.ErrNotFound):
		writeJSON(w, http.StatusNotFound, Error{err.Error()})
	case errors.Is(err, audit.ErrStateConflict):
		writeJSON(w, http.StatusConflict, Error{err.Error()})
	case errors.Is(err, audit.ErrUnavailable):
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, Error{err.Error()})
	default:
		writeJSON(w, http.StatusInternalServerError, Error{err.Error()})
	}
}

// paramError names a bad query parameter.
type paramError struct {
	name, reason string
}

func (e *paramError) Error() string { return "parameter " + e.name + ": " + e.reason }

// CheckRange returns an error naming until when since and until are both
// given and until is before since: the range is empty, and an answer of
// nothing would hide the mistake (since and until swapped). The query API
// and the pages both refuse such a range.
func CheckRange(since, until time.Time) error {
	if !since.IsZero() && !until.IsZero() && since.After(until) {
		return &paramError{"until", fmt.Sprintf("%s is before since (%s): the range is empty",
			until.UTC().Format(time.RFC3339Nano), since.UTC().Format(time.RFC3339Nano))}
	}
	return nil
}

// params reads query parameters, remembering the first error.
type params struct {
	q   url.Values
	now time.Time
	err error
}

func (p *params) str(name string) string { return p.q.Get(name) }

// time reads a time (ParseTime) of the query parameter name.
func (p *params) time(name string) time.Time {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return time.Time{}
	}
	t, err := ParseTime(v, p.now)
	if err != nil {
		p.err = &paramError{name, err.Error()}
	}
	return t
}

// zonelessLayouts are the times without a zone that ParseTime reads as UTC:
// the investigation page shows times as "2006-01-02 15:04:05.000" in UTC,
// and a person copies them, or types a minute, into since and until.
var zonelessLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02",
}

// ParseTime reads a time given to since or until: RFC 3339 ("2026-12-04T14:02:00Z",
// also with a space for the T), a time without a zone taken as UTC, as the page
// shows them ("2026-12-04 14:02:05.123", "2026-12-04 14:02", "2026-12-04"), or a
// duration back from now ("1h", "30d"). The time must be within 1678-2261.
func ParseTime(v string, now time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.Replace(v, " ", "T", 1))
	for _, layout := range zonelessLayouts {
		if err == nil {
			break
		}
		t, err = time.Parse(layout, v)
	}
	if err == nil {
		if err := CheckTime(t); err != nil {
			return time.Time{}, err
		}
		return t, nil
	}
	if d, err := ParseWindow(v); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time, a UTC time such as 2026-12-04 14:02, or a duration such as 1h or 30d, not %s", strconv.Quote(v))
}

// CheckTime rejects a time the stores cannot hold: nanoseconds since 1970
// in 64 bits reach from 1678 to 2261.
func CheckTime(t time.Time) error {
	if y := t.Year(); y < 1678 || y > 2261 {
		return fmt.Errorf("%s is outside 1678-2261", t.Format(time.RFC3339))
	}
	return nil
}

// MaxWindow is the longest window a query may span: 100 years.
const MaxWindow = 100 * 365 * 24 * time.Hour

// ParseTarget parses an SLO target: a number in (0, 1], or (0, 1) when
// one is not allowed. NaN and infinities are refused.
func ParseTarget(s string, allowOne bool) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	ok := err == nil && f > 0 && (f < 1 || allowOne && f == 1)
	if !ok {
		if allowOne {
			return 0, fmt.Errorf("want a number in (0, 1], not %q", s)
		}
		return 0, fmt.Errorf("want a number in (0, 1), not %q", s)
	}
	return f, nil
}

func (p *params) int(name string) int {
	v := p.q.Get(name)
	if v == "" || p.err != nil {
		return 0
	}
	n, err := strconv.Atoi(v)
	switch {
	case errors.Is(err, strconv.ErrRange) && v[0] != '-':
		// An integer all the same, which "want a non-negative integer"
		// denied (adv22).
		p.err = &paramError{name, v + " is too large: want a non-negative integer of at most 9223372036854775807 (a limit past its endpoint's maximum is taken as that maximum)"}
	case err != nil || n < 0:
		p.err = &paramError{name, "want a non-negative integer"}
	}
	return n
}

// ParseWindow parses a Go duration, also accepting days ("30d") and weeks
// ("1w"). It must be positive and at most MaxWindow.
func ParseWindow(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			// NaN fails both comparisons; a huge or infinite count fails
			// the second before it can overflow a Duration.
			if err != nil || !(f > 0) || !(f*float64(unit) <= float64(MaxWindow)) {
				return 0, fmt.Errorf("bad window %q: want a positive duration of at most 100 years, such as 1h, 30d or 2w", s)
			}
			return time.Duration(f * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxWindow {
		return 0, fmt.Errorf("bad window %q: want a positive duration of at most 100 years, such as 1h, 30d or 2w", s)
	}
	return d, nil
}

// newParams authenticates the request and checks that it names only the
// parameters in known (and tenant); it answers the request itself and
// returns false when it may not go on.
func (s *Server) newParams(w http.ResponseWriter, r *http.Request, known ...string) (*params, string, bool) {
	p, ok := s.Authorize(w, r)
	if !ok {
		return nil, "", false
	}
	q := r.URL.Query()
	var unknown []string
	for name := range q {
		if name != "tenant" && !slices.Contains(known, name) {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		takes := strings.Join(known, ", ")
		if len(known) == 0 {
			takes = "no parameter but tenant"
		}
		writeJSON(w, http.StatusBadRequest, Error{fmt.Sprintf("unknown parameter %s; %s takes %s",
			strings.Join(unknown, ", "), r.URL.Path, takes)})
		return nil, "", false
	}
	for name, vs := range q {
		if len(vs) > 1 {
			// Only the first would be read: the others would be dropped
			// unsaid.
			writeJSON(w, http.StatusBadRequest, Error{(&paramError{name, fmt.Sprintf("given %d times; give it once", len(vs))}).Error()})
			return nil, "", false
		}
	}
	pp := &params{q: q, now: s.Now()}
	if slices.Contains(known, "since") && slices.Contains(known, "until") {
		// A range that ends before it begins is empty: an answer of
		// nothing would hide the mistake (since and until swapped).
		check := *pp
		since, until := check.time("since"), check.time("until")
		if err := CheckRange(since, until); check.err == nil && err != nil {
			writeJSON(w, http.StatusBadRequest, Error{err.Error()})
			return nil, "", false
		}
	}
	return pp, access.Tenant(p, r), true
}

// CheckParams applies the rules every endpoint of the API follows to a
// request of an endpoint that takes the parameters known (and tenant): a
// credential of the query scope for its tenant, no unknown parameter, none
// given twice, and until not before since. It answers the request itself
// and returns false when it may not go on; otherwise it returns the tenant
// the request reads. Endpoints served beside the API (the report) use it
// so that the rules are written once.
func (s *Server) CheckParams(w http.ResponseWriter, r *http.Request, known ...string) (string, bool) {
	_, tenant, ok := s.newParams(w, r, known...)
	return tenant, ok
}

// Parameters of each endpoint, besides tenant.
var (
	findingParams  = []string{"id", "kind", "severity", "state", "server", "document", "key", "session", "since", "until", "limit", "cursor", "order"}
	writeParams    = []string{"state", "server", "document", "session", "since", "until", "limit", "cursor"}
	timelineParams = []string{"server", "since", "until", "limit"}
	// timelineByNameParams are those of the timeline's query form.
	timelineByNameParams = []string{"name", "server", "since", "until", "limit"}
	sloParams            = []string{"window", "until", "server", "target"}
)

func (s *Server) findings(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, findingParams...)
	if !ok {
		return
	}
	q := findingQuery(p, tenant)
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	sayClamped(w, q.Limit, store.MaxPage)
	page, err := s.store.Findings(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	if page.Findings == nil {
		page.Findings = []audit.Finding{}
	}
	withStatus(page.Findings)
	writeJSON(w, http.StatusOK, page)
}

func validKind(k audit.Kind) bool {
	for _, x := range audit.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

func (s *Server) writes(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, writeParams...)
	if !ok {
		return
	}
	q := audit.WriteQuery{
		State: audit.WriteState(p.str("state")), Server: p.str("server"), Tenant: tenant,
		Document: p.str("document"), Session: p.str("session"), Since: p.time("since"), Until: p.time("until"),
		Limit: p.int("limit"), Cursor: p.str("cursor"),
	}
	if p.err == nil && q.State != "" {
		valid := false
		for _, st := range audit.WriteStates {
			valid = valid || st == q.State
		}
		if !valid {
			p.err = &paramError{"state", "unknown write state " + strconv.Quote(string(q.State))}
		}
	}
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	sayClamped(w, q.Limit, store.MaxPage)
	page, err := s.store.Writes(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	if page.Writes == nil {
		page.Writes = []audit.Write{}
	}
	writeJSON(w, http.StatusOK, page)
}

// Timeline is the answer of GET /api/v1/documents/{document}/timeline:
// the document, its earliest events in the range and, when the range held
// more, truncated and the since to continue from (next_since).
type Timeline struct {
	Document string `json:"document"`
	audit.TimelinePage
	// Downtimes are the times serve was down that overlap the range the
	// answer covers (TimelineRange), oldest first: calls of that time may
	// be missing from the events.
	Downtimes []Downtime `json:"downtimes,omitempty"`
}

// TimelineRange is the range of event time a timeline answer covers, for
// the downtimes it tells: from since, or without it from the earliest
// event returned (from the beginning when none is); to next_since when
// truncated (later events are not shown), else to until, or without it
// to now. A zero bound is open.
func TimelineRange(since, until time.Time, page audit.TimelinePage, now time.Time) (from, to time.Time) {
	from, to = since, until
	if from.IsZero() && len(page.Events) > 0 {
		from = page.Events[0].Time
	}
	switch {
	case page.Truncated:
		to = page.NextSince
	case to.IsZero():
		to = now
	}
	return from, to
}

// DowntimesIn returns the downtimes this server keeps that overlap [from,
// to] (a zero bound is open), oldest first, as the API tells them; nil
// without any.
func (s *Server) DowntimesIn(from, to time.Time) []Downtime {
	if s.Downtimes == nil {
		return nil
	}
	var out []Downtime
	for _, d := range audit.DowntimesIn(s.Downtimes(), from, to) {
		out = append(out, DowntimeOf(d))
	}
	return out
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	// Thegram paths hold slashes: the document is everything between the
	// prefix and the /timeline suffix, escaped or not.
	raw := strings.TrimPrefix(r.URL.EscapedPath(), "/api/v1/documents/")
	raw, ok := strings.CutSuffix(raw, "/timeline")
	if !ok || raw == "" {
		writeJSON(w, http.StatusNotFound, Error{"want /api/v1/documents/{document}/timeline"})
		return
	}
	doc, err := url.PathUnescape(raw)
	if err != nil {
		s.fail(w, &paramError{"document", "bad escaping"})
		return
	}
	p, tenant, ok := s.newParams(w, r, timelineParams...)
	if !ok {
		return
	}
	s.serveTimeline(w, r, doc, p, tenant)
}

// timelineByName answers GET /api/v1/documents/timeline?name=DOCUMENT, the
// timeline's query form: a client that resolves dot segments (a browser,
// %2E included, as the URL standard says) cannot send a document named "."
// or ".." in the path, and a name in the query reaches the store as it is.
func (s *Server) timelineByName(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, timelineByNameParams...)
	if !ok {
		return
	}
	doc := p.str("name")
	if doc == "" {
		s.fail(w, &paramError{"name", "want the document's name (/api/v1/documents/timeline?name=DOCUMENT)"})
		return
	}
	s.serveTimeline(w, r, doc, p, tenant)
}

// serveTimeline answers the timeline of doc for a request whose parameters
// and credential are checked.
func (s *Server) serveTimeline(w http.ResponseWriter, r *http.Request, doc string, p *params, tenant string) {
	q := audit.TimelineQuery{Server: p.str("server"), Tenant: tenant, Document: doc,
		Since: p.time("since"), Until: p.time("until"), Limit: p.int("limit")}
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	sayClamped(w, q.Limit, store.MaxTimeline)
	page, err := s.store.Timeline(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	if page.Events == nil {
		page.Events = []audit.TimelineEvent{}
	}
	from, to := TimelineRange(q.Since, q.Until, page, s.Now())
	writeJSON(w, http.StatusOK, Timeline{Document: doc, TimelinePage: page, Downtimes: s.DowntimesIn(from, to)})
}

// SLO is the answer of GET /api/v1/slo.
type SLO struct {
	Window string                     `json:"window"`
	Since  time.Time                  `json:"since"`
	Until  time.Time                  `json:"until"`
	Server string                     `json:"server,omitempty"`
	Target float64                    `json:"target"`
	Counts map[audit.WriteState]int64 `json:"counts"`
	// SLI is null when no write counts toward it.
	SLI *float64 `json:"sli"`
	// ErrorBudgetRemaining is the share of the window's error budget left:
	// 1 when no write failed durability, 0 when the budget is spent,
	// negative when overspent. Null when no write counts.
	ErrorBudgetRemaining *float64 `json:"error_budget_remaining"`
	// ErrorBudgetSpent is how many times the error budget was spent, 1 -
	// ErrorBudgetRemaining (750 when an error rate of 75 % meets a budget
	// of 0.1 %), as the report's error_budget_spent. Null with it.
	ErrorBudgetSpent *float64 `json:"error_budget_spent"`
	// ErrorBudgetLeft says ErrorBudgetRemaining as the page, the report and
	// mcpaudit slo print it (BudgetLeft): "99.00%", or "none: spent 750×
	// (error rate 75% against a budget of 0.1%)". Empty when no write
	// counts.
	ErrorBudgetLeft string `json:"error_budget_left,omitempty"`
	// Stored, when the window holds no write, is where the stored writes
	// of its tenant and server lie, with the until and window that cover
	// them, as the report's stored_writes; absent when the window holds a
	// write or none is stored.
	Stored *Stored `json:"stored_writes,omitempty"`
}

// NoWrite reports whether counts hold no write at all, in any state (then
// /api/v1/slo and report say where the stored writes lie).
func NoWrite(counts map[audit.WriteState]int64) bool {
	for _, n := range counts {
		if n != 0 {
			return false
		}
	}
	return true
}

// ComputeSLO fills the SLI and the error budget from counts.
func ComputeSLO(counts map[audit.WriteState]int64, target float64) (sli, budget *float64) {
	v, ok := audit.SLI(counts)
	if !ok {
		return nil, nil
	}
	b := 1.0
	if target < 1 {
		b = 1 - (1-v)/(1-target)
	} else if v < 1 {
		b = math.Inf(-1)
	}
	return &v, &b
}

func (s *Server) slo(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, sloParams...)
	if !ok {
		return
	}
	window := p.str("window")
	if window == "" {
		window = "30d"
	}
	d, err := ParseWindow(window)
	if err != nil {
		s.fail(w, &paramError{"window", err.Error()})
		return
	}
	target := s.SLOTarget
	if t := p.str("target"); t != "" {
		f, err := ParseTarget(t, true)
		if err != nil {
			s.fail(w, &paramError{"target", err.Error()})
			return
		}
		target = f
	}
	until := p.time("until")
	if until.IsZero() {
		until = p.now
	}
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	since := until.Add(-d)
	counts, err := s.store.WriteCounts(r.Context(), audit.CountQuery{Server: p.str("server"), Tenant: tenant, Since: since, Until: until})
	if err != nil {
		s.fail(w, err)
		return
	}
	full := map[audit.WriteState]int64{}
	for _, st := range audit.WriteStates {
		full[st] = counts[st]
	}
	out := SLO{Window: window, Since: since, Until: until, Server: p.str("server"), Target: target, Counts: full}
	if NoWrite(counts) {
		if out.Stored, err = StoredWrites(r.Context(), s.store, tenant, p.str("server")); err != nil {
			s.fail(w, err)
			return
		}
	}
	out.SLI, out.ErrorBudgetRemaining = ComputeSLO(counts, target)
	if out.ErrorBudgetRemaining != nil && math.IsInf(*out.ErrorBudgetRemaining, 0) {
		out.ErrorBudgetRemaining = nil
	}
	if b := out.ErrorBudgetRemaining; b != nil {
		spent := 1 - *b
		out.ErrorBudgetSpent = &spent
		out.ErrorBudgetLeft = BudgetLeft(*b, target)
	}
	writeJSON(w, http.StatusOK, out)
}
