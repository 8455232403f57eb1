package report

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
)

// Params are the parameters of GET /api/v1/report, besides tenant.
var Params = []string{"window", "until", "server", "target", "format"}

// Handler serves GET /api/v1/report?window=30d[&until=T][&server=S]
// [&target=0.999][&format=json|html|md] from store, for the tenant of the
// caller's credential, under the rules of the query API (api.CheckParams):
// 401/403 as it refuses, 400 for an unknown or repeated parameter, until
// as every endpoint reads a time (api.ParseTime), and 405 with Allow for a
// method other than GET and HEAD. `mcpaudit report --api-url` reads it.
func Handler(store audit.Store, auth *api.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			api.NotAllowed(w, r, "GET, HEAD")
			return
		}
		tenant, ok := auth.CheckParams(w, r, Params...)
		if !ok {
			return
		}
		qv := r.URL.Query()
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
		switch format {
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		case "md":
			w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
		case "json":
			w.Header().Set("Content-Type", "application/json")
		default:
			httpError(w, http.StatusBadRequest, "parameter format: want json, html or md, not "+strconv.Quote(format))
			return
		}
		rep, err := Build(r.Context(), store, q)
		if err != nil {
			status := http.StatusInternalServerError
			if errors.Is(err, audit.ErrUnavailable) {
				status = http.StatusServiceUnavailable
				w.Header().Set("Retry-After", "5")
			}
			httpError(w, status, err.Error())
			return
		}
		Render(w, rep, format)
	})
}

// QueryOf reads a report's window, end and target as the query API spells
// them: window a duration such as "30d" (default), until a time as
// api.ParseTime reads it (RFC 3339, a UTC time without a zone, or a
// duration back from now; default now), target a fraction in (0, 1]
// (default def; 1 is 100 %: no error budget, as /api/v1/slo takes it).
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
		t, err := api.ParseTime(until, now)
		if err != nil {
			return Query{}, errors.New("parameter until: " + err.Error())
		}
		q.Until = t
	}
	if target != "" {
		f, err := api.ParseTarget(target, true)
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
