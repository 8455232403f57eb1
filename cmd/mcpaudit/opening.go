package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// swapHandler serves through the handler last stored: the API listener
// answers from the start of serve, with openingHandler until the store is
// open and the service is built, then with the whole mux.
type swapHandler struct {
	h atomic.Pointer[http.Handler]
}

func (s *swapHandler) store(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// openingState says what serve does before it is ready: it opens the store
// (a migration or a build of the id index can take minutes on a large
// store), then rebuilds the detector's state from it.
type openingState struct {
	step atomic.Pointer[string]
}

func newOpeningState() *openingState {
	o := &openingState{}
	o.set("opening the store")
	return o
}

func (o *openingState) set(step string) { o.step.Store(&step) }

// progress records a step of the store's open: what it does and how far it
// got ("building the call id index: 120000 of 300000 calls (40%)").
func (o *openingState) progress(p sqlite.Progress) {
	step := "opening the store: " + p.Step
	if p.Total > 0 {
		step += fmt.Sprintf(": %d of %d calls (%d%%)", p.Done, p.Total, p.Done*100/p.Total)
	}
	o.set(step)
}

func (o *openingState) String() string { return *o.step.Load() }

// openingRetryAfter is the Retry-After, in seconds, of what is refused
// while serve opens.
const openingRetryAfter = "5"

// openingHandler answers the API listener while serve opens: /healthz 200
// (the process is alive: a liveness probe must not restart it in the
// middle of a migration, which would roll it back), /readyz 503 saying
// what it does, and everything else 503 with Retry-After: as JSON under
// /api/v1/, as text elsewhere (/metrics, the page).
func openingHandler(o *openingState) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			fmt.Fprintln(w, "ok")
			return
		case r.URL.Path == "/readyz" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			http.Error(w, "store not ready: "+o.String(), http.StatusServiceUnavailable)
			return
		}
		msg := "mcpaudit is starting (" + o.String() + "); try again shortly"
		w.Header().Set("Retry-After", openingRetryAfter)
		if strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			b, _ := json.Marshal(api.Error{Error: msg})
			w.Write(append(b, '\n'))
			return
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
	})
}
