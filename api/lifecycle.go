package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/access"
)

// Credential is a named bearer token of the query API and the page.
type Credential struct {
	// Token is the secret the caller sends as "Authorization: Bearer".
	Token string `yaml:"token"`
	// Tenant is the one tenant the token may see, or "*" for every tenant.
	Tenant string `yaml:"tenant"`
}

// Principal is who a request speaks for (access.Principal).
type Principal = access.Principal

// AuthOn reports whether callers must present a credential.
func (s *Server) AuthOn() bool { return s.auth().On() }

// auth returns the authenticator of the server: Access, or one built once
// from Tenants and Credentials.
func (s *Server) auth() *access.Authenticator {
	if s.Access != nil {
		return s.Access
	}
	s.authOnce.Do(func() {
		a, err := access.New(access.Config{}, Entries(s.Tenants, s.Credentials))
		if err != nil {
			// Two credentials with one token: refuse everyone rather than
			// guess which was meant.
			a, _ = access.New(access.Config{}, []access.Entry{{Name: "invalid", Tenant: "invalid", Scopes: access.ScopeQuery}})
		}
		s.built = a
	})
	return s.built
}

// Entries turns the inline credentials of the configuration into access
// entries: a receiver tenant token may send that tenant's calls and read
// them, a named credential may read its tenant (or every tenant, "*") and
// scrape /metrics when it is for every tenant.
func Entries(tenants map[string]string, creds map[string]Credential) []access.Entry {
	var out []access.Entry
	for tok, tenant := range tenants {
		out = append(out, access.Entry{Name: tenant, Tenant: tenant, Scopes: access.ScopeIngest | access.ScopeQuery, Hash: access.HashToken(tok)})
	}
	for name, c := range creds {
		scopes := access.ScopeQuery
		if c.Tenant == access.AllTenants {
			scopes |= access.ScopeMetrics
		}
		out = append(out, access.Entry{Name: name, Tenant: c.Tenant, Scopes: scopes, Hash: access.HashToken(c.Token)})
	}
	return out
}

// Identify returns the principal of the request's bearer token or client
// certificate whatever its scopes; ok is false when authentication is on
// and neither is known.
func (s *Server) Identify(r *http.Request) (Principal, bool) { return s.auth().Request(r) }

// IdentifyToken returns the principal of a token whatever its scopes; ok
// is false for an unknown token.
func (s *Server) IdentifyToken(tok string) (Principal, bool) { return s.auth().Token(tok) }

// NoScope is the refusal of a known credential without the query scope.
func NoScope(p Principal) string {
	return fmt.Sprintf("credential %s may not read (no query scope; it has: %s)", p.Name, p.Scopes)
}

// Authorize authenticates the request for the query scope, and answers it
// when it may not go on: 401 with WWW-Authenticate for a missing or
// unknown credential, 403 for a known one without the query scope, 403
// for a tenant parameter or header naming another tenant. Every refusal is
// logged at a bounded rate, never with the token.
func (s *Server) Authorize(w http.ResponseWriter, r *http.Request) (Principal, bool) {
	// The route, not the path: a timeline's path holds a document's name,
	// which no log line holds (docs/metrics.md).
	path := r.URL.Path
	if strings.HasPrefix(path, "/api/v1/documents/") {
		path = "/api/v1/documents/{document}/timeline"
	}
	p, ok := s.Identify(r)
	if !ok {
		s.Log.Warn("auth_failure", "query API request refused: missing or unknown bearer token",
			"remote", r.RemoteAddr, "path", path, "has_authorization", r.Header.Get("Authorization") != "")
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpaudit"`)
		writeJSON(w, http.StatusUnauthorized, Error{cmp.Or(access.Repeated(r.Header.Values("Authorization")), "missing or unknown bearer token")})
		return Principal{}, false
	}
	if !p.Can(access.ScopeQuery) {
		s.Log.Warn("scope_refused", "query API request refused: the credential has no query scope",
			"remote", r.RemoteAddr, "path", path, "credential", p.Name)
		writeJSON(w, http.StatusForbidden, Error{NoScope(p)})
		return Principal{}, false
	}
	if err := access.Conflict(p, r); err != nil {
		s.Log.Warn("tenant_conflict", "query API request refused: it names another tenant than its credential's",
			"remote", r.RemoteAddr, "path", path, "credential", p.Name)
		writeJSON(w, http.StatusForbidden, Error{err.Error()})
		return Principal{}, false
	}
	return p, true
}

// findingQuery reads the filters of /api/v1/findings and the page.
func findingQuery(p *params, tenant string) audit.FindingQuery {
	q := audit.FindingQuery{
		ID: p.str("id"), Kind: audit.Kind(p.str("kind")), Severity: audit.Severity(p.str("severity")),
		Server: p.str("server"), Tenant: tenant, Document: p.str("document"), Key: p.str("key"),
		Session: p.str("session"), Since: p.time("since"), Until: p.time("until"),
		Limit: p.int("limit"), Cursor: p.str("cursor"), State: audit.FindingState(p.str("state")),
	}
	switch o := p.str("order"); o {
	case "", "time":
	case "newest":
		q.Newest = true
	default:
		if p.err == nil {
			p.err = &paramError{"order", "want time or newest, not " + strconv.Quote(o)}
		}
	}
	if p.err == nil && q.Kind != "" && !validKind(q.Kind) {
		p.err = &paramError{"kind", "unknown finding kind " + strconv.Quote(string(q.Kind))}
	}
	if p.err == nil && q.Severity != "" && q.Severity.Rank() == 0 {
		p.err = &paramError{"severity", "want info, warning or critical, not " + strconv.Quote(string(q.Severity))}
	}
	if p.err == nil && q.State != "" && !q.State.Valid() {
		p.err = &paramError{"state", "want open, acknowledged, resolved or withdrawn, not " + strconv.Quote(string(q.State))}
	}
	return q
}

// FindingQueryOf reads finding filters from query parameters as
// /api/v1/findings does (the page shares them); the error names the bad
// parameter.
func (s *Server) FindingQueryOf(r *http.Request, tenant string) (audit.FindingQuery, error) {
	p := &params{q: r.URL.Query(), now: s.Now()}
	q := findingQuery(p, tenant)
	if p.err != nil {
		return q, p.err
	}
	return q, CheckRange(q.Since, q.Until)
}

// withStatus gives every finding a status: open when nobody changed it.
func withStatus(fs []audit.Finding) {
	for i := range fs {
		if fs[i].Status == nil {
			fs[i].Status = &audit.FindingStatus{State: audit.FindingOpen}
		}
	}
}

// FindingDetail is the answer of GET /api/v1/findings/{id}.
type FindingDetail struct {
	Finding audit.Finding         `json:"finding"`
	History []audit.FindingChange `json:"history"`
}

// FindingCounts is the answer of GET /api/v1/findings/counts.
type FindingCounts struct {
	Counts []audit.FindingCount `json:"counts"`
}

func (s *Server) finding(w http.ResponseWriter, r *http.Request) {
	_, tenant, ok := s.newParams(w, r)
	if !ok {
		return
	}
	d, err := s.Detail(r, r.PathValue("id"), tenant)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// Detail returns one finding of the tenant with its history, or an error
// wrapping audit.ErrNotFound.
func (s *Server) Detail(r *http.Request, id, tenant string) (FindingDetail, error) {
	page, err := s.store.Findings(r.Context(), audit.FindingQuery{ID: id, Tenant: tenant, Limit: 1})
	if err != nil {
		return FindingDetail{}, err
	}
	if len(page.Findings) == 0 {
		return FindingDetail{}, fmt.Errorf("finding %s: %w", id, audit.ErrNotFound)
	}
	h, err := s.store.FindingHistory(r.Context(), id, tenant)
	if err != nil {
		return FindingDetail{}, err
	}
	withStatus(page.Findings)
	return FindingDetail{Finding: page.Findings[0], History: h}, nil
}

func (s *Server) findingCounts(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, findingParams...)
	if !ok {
		return
	}
	q := findingQuery(p, tenant)
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	cs, err := s.store.FindingCounts(r.Context(), q)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, FindingCounts{Counts: cs})
}

// ChangeRequest is the body of POST /api/v1/findings/{id}/ack|resolve|reopen.
type ChangeRequest struct {
	Note string `json:"note"`
	// By names who makes the change when authentication is off; with it
	// on, the credential's name is recorded and By is ignored.
	By string `json:"by,omitempty"`
}

// Actions of POST /api/v1/findings/{id}/{action} and the states they set.
var Actions = map[string]audit.FindingState{
	"ack":     audit.FindingAcknowledged,
	"resolve": audit.FindingResolved,
	"reopen":  audit.FindingOpen,
}

// maxNote bounds a note, in bytes.
const maxNote = 4096

// maxChangeBody bounds the body of a state change, in bytes: a note of
// maxNote bytes, escaped, with room to spare.
const maxChangeBody = 64 << 10

func (s *Server) changeFinding(w http.ResponseWriter, r *http.Request) {
	p, ok := s.Authorize(w, r)
	if !ok {
		return
	}
	state, ok := Actions[r.PathValue("action")]
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{"want POST /api/v1/findings/{id}/ack, /resolve or /reopen"})
		return
	}
	var req ChangeRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, maxChangeBody+1))
	if err != nil {
		s.fail(w, &paramError{"body", err.Error()})
		return
	}
	if len(body) > maxChangeBody {
		// Cut, it would be answered "unexpected EOF": say what is too long.
		s.fail(w, &paramError{"body", fmt.Sprintf("longer than %d bytes; a note holds at most %d", maxChangeBody, maxNote)})
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			s.fail(w, &paramError{"body", "want {\"note\": \"...\"}: " + err.Error()})
			return
		}
	}
	st, err := s.Change(r, p, r.PathValue("id"), state, req)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// Change records a state change of a finding for principal p and returns
// the new status. Errors wrap audit.ErrNotFound, audit.ErrStateConflict or
// name the bad field.
func (s *Server) Change(r *http.Request, p Principal, id string, state audit.FindingState, req ChangeRequest) (audit.FindingStatus, error) {
	if len(req.Note) > maxNote {
		return audit.FindingStatus{}, &paramError{"note", fmt.Sprintf("longer than %d bytes", maxNote)}
	}
	by := p.Name
	if !p.Authenticated {
		by = strings.TrimSpace(req.By)
		if by == "" {
			by = "anonymous"
		}
	}
	return s.store.ChangeFinding(r.Context(), audit.FindingChange{FindingID: id, Tenant: p.Tenant, State: state,
		By: by, Note: req.Note, Time: s.Now().UTC()})
}
