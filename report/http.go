package report

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/access"
)

// Handler serves GET /api/v1/report?window=30d[&until=RFC3339][&server=S]
// [&target=0.999][&format=json|html|md] from store, for the tenant of the
// caller's credential as the query API sees it. `mcpaudit report --server`
// reads it.
func Handler(store audit.Store, auth *api.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 401 without a known credential, 403 without the query scope or
		// for another tenant, as the query API answers.
		p, ok := auth.Authorize(w, r)
		if !ok {
			return
		}
		qv := r.URL.Query()
		tenant := access.Tenant(p, r)
		q, err := QueryOf(qv.Get("window"), qv.Get("until"), qv.Get("target"), auth.SLOTarget, auth.Now())
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		q.Tenant, q.Server = tenant, qv.Get("server")
		format := qv.Get("format")
		if format == "" {
			format = "json"
		}
		rep, err := Build(r.Context(), store, q)
		if err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, audit.ErrUnavailable) {
				status = http.StatusServiceUnavailable
			}
			httpError(w, status, err.Error())
			return
		}
		switch format {
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		case "md":
			w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		case "json":
			w.Header().Set("Content-Type", "application/json")
		default:
			httpError(w, http.StatusBadRequest, "parameter format: want json, html or md")
			return
		}
		Render(w, rep, format)
	})
}

// QueryOf reads a report's window, end and target as the API spells them:
// window "30d" (default), until an RFC 3339 time (default now), target a
// fraction in (0, 1) (default def).
func QueryOf(window, until, target string, def float64, now time.Time) (Query, error) {
	if window == "" {
		window = "30d"
	}
	d, err := api.ParseWindow(window)
	if err != nil {
		return Query{}, errors.New("parameter window: " + err.Error())
	}
	q := Query{Window: d, WindowName: window, Target: def, Until: now}
	if until != "" {
		t, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return Query{}, errors.New("parameter until: want an RFC 3339 time")
		}
		if err := api.CheckTime(t); err != nil {
			return Query{}, errors.New("parameter until: " + err.Error())
		}
		q.Until = t
	}
	if target != "" {
		f, err := api.ParseTarget(target, false)
		if err != nil {
			return Query{}, errors.New("parameter target: " + err.Error())
		}
		q.Target = f
	}
	return q, nil
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(api.Error{Error: msg})
}
