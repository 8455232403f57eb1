package web

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/mcpaudit/mcpaudit/audit"
)

// callsView is /calls/: the stored calls of a time range, narrowed by
// server and by the retry action of their failures.
type callsView struct {
	Filters url.Values
	Action  audit.RetryAction
	Actions []audit.RetryAction
	Calls   []callRow
	// Read is how many stored calls were read for this page; Next links
	// to the rest of the range when the page stopped before its end.
	Read int
	Next string
}

// Reading stored calls for /calls/: a page keeps at least callsShown of
// those matching, reading the store callsBatch at a time and at most
// callsRead calls, then links to the rest.
const (
	callsShown = 50
	callsBatch = 500
	callsRead  = 20000
)

// failureWith returns r's failure of retry action a: its own, else the
// first of its operations', as mcpaudit_call_failures_total counts them
// (McpAuditUncertainOutcomes divides those by the calls); nil when none has
// it.
func failureWith(r *audit.Record, a audit.RetryAction) *audit.Failure {
	if r.Failure != nil && r.Failure.Action == a {
		return r.Failure
	}
	for i := range r.Ops {
		if f := r.Ops[i].Failure; f != nil && f.Action == a {
			return f
		}
	}
	return nil
}

// callList answers /calls/?server=&retry_action=&since=&until=: the calls
// behind McpAuditUncertainOutcomes (its investigation_url), or any retry
// action's. Before op46 that alert linked to the unverified_write
// findings, and no page listed calls by retry action.
func (s *Server) callList(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	qv := r.URL.Query()
	now := s.api.Now()
	since, err := parseTime("since", qv.Get("since"), now)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	until, err := parseTime("until", qv.Get("until"), now)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		s.fail(w, r, fmt.Errorf("%w until: %s is before since %s", errBadParam, qv.Get("until"), qv.Get("since")))
		return
	}
	v := callsView{Filters: url.Values{}, Actions: audit.RetryActions, Action: audit.RetryAction(qv.Get("retry_action"))}
	if v.Action != "" && !slices.Contains(audit.RetryActions, v.Action) {
		s.fail(w, r, fmt.Errorf("%w retry_action: %q is not a retry action (one of %v)", errBadParam, v.Action, audit.RetryActions))
		return
	}
	for _, k := range []string{"server", "retry_action", "since", "until", "tenant"} {
		if x := qv.Get(k); x != "" {
			v.Filters.Set(k, x)
		}
	}
	q := audit.CallQuery{Tenant: p.Tenant, Server: qv.Get("server"), Since: since, Until: until, Limit: callsBatch, Cursor: qv.Get("cursor")}
	v.Calls = []callRow{}
	for {
		page, err := s.store.Calls(r.Context(), q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v.Read += len(page.Calls)
		for i := range page.Calls {
			if v.Action == "" || failureWith(&page.Calls[i], v.Action) != nil {
				v.Calls = append(v.Calls, rowOf(&page.Calls[i], v.Action))
			}
		}
		if page.NextCursor == "" {
			break
		}
		if len(v.Calls) >= callsShown || v.Read >= callsRead {
			n := url.Values{}
			for k, x := range v.Filters {
				n[k] = x
			}
			n.Set("cursor", page.NextCursor)
			v.Next = "/calls/?" + n.Encode()
			break
		}
		q.Cursor = page.NextCursor
	}
	title := "Calls"
	if v.Action != "" {
		title = "Calls failed with " + string(v.Action)
	}
	s.render(w, r, "calls", http.StatusOK, title, &v)
}

// callRow is one line of /calls/: a call and the failure it is listed for.
type callRow struct {
	Call      *audit.Call
	Outcome   audit.Outcome
	Failure   *audit.Failure
	Documents []string
}

// rowOf returns r's line, with its failure of retry action a
// (failureWith), or its own failure when a is empty.
func rowOf(r *audit.Record, a audit.RetryAction) callRow {
	row := callRow{Call: r.Call, Outcome: r.Outcome, Failure: r.Failure, Documents: r.Documents()}
	if a != "" {
		row.Failure = failureWith(r, a)
	}
	return row
}
