package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

// CallPage is the answer of GET /api/v1/calls: stored calls in time order,
// each as the call event of a document's timeline, so that a client reads
// one call JSON wherever it meets one.
type CallPage struct {
	Calls      []audit.TimelineEvent `json:"calls"`
	NextCursor string                `json:"next_cursor"`
}

// CallDetail is the answer of GET /api/v1/calls/{id}: the call, and the
// documents it read or wrote (whose timelines hold it), empty for a call
// that names none.
type CallDetail struct {
	Call      audit.TimelineEvent `json:"call"`
	Documents []string            `json:"documents"`
}

// callParams are the parameters of /api/v1/calls, besides tenant.
var callParams = []string{"server", "session", "source", "document", "since", "until", "limit", "cursor"}

// callEvent is the JSON of a stored call: its timeline event.
func callEvent(r *audit.Record) audit.TimelineEvent {
	return store.CallEvent(r.Call, r.Outcome, r.Failure)
}

func (s *Server) calls(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, callParams...)
	if !ok {
		return
	}
	q := audit.CallQuery{Tenant: tenant, Server: p.str("server"), Session: p.str("session"), Source: p.str("source"), Document: p.str("document"),
		Since: p.time("since"), Until: p.time("until"), Limit: p.int("limit"), Cursor: p.str("cursor")}
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	sayClamped(w, q.Limit, store.MaxPage)
	page, err := s.store.Calls(r.Context(), q)
	if errors.Is(err, audit.ErrBadCursor) {
		// Name the parameter, as for every other bad one.
		err = &paramError{"cursor", "not a next_cursor of /api/v1/calls (pass one back unchanged, with the same filters)"}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	out := CallPage{Calls: make([]audit.TimelineEvent, len(page.Calls)), NextCursor: page.NextCursor}
	for i := range page.Calls {
		out.Calls[i] = callEvent(&page.Calls[i])
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	_, tenant, ok := s.newParams(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	page, err := s.store.Calls(r.Context(), audit.CallQuery{IDs: []string{id}, Tenant: tenant})
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(page.Calls) == 0 {
		s.fail(w, fmt.Errorf("call %s: %w", id, audit.ErrNotFound))
		return
	}
	// Without a tenant (authentication off, no tenant parameter), an
	// exchange that two tenants both posted is stored once for each; the
	// first is answered.
	c := &page.Calls[0]
	docs := c.Documents()
	if docs == nil {
		docs = []string{}
	}
	writeJSON(w, http.StatusOK, CallDetail{Call: callEvent(c), Documents: docs})
}

// exportParams are the parameters of /api/v1/calls/export, besides tenant.
var exportParams = []string{"server", "session", "since", "until"}

// DefaultPageTimeout is Server.PageTimeout's default.
const DefaultPageTimeout = 2 * time.Minute

// DefaultMaxExports is Server.MaxExports's default.
const DefaultMaxExports = 4

// exportRetryAfter is the Retry-After, in seconds, of an export refused
// at MaxExports.
const exportRetryAfter = "10"

// takeExport takes a slot of MaxExports; false when every slot is taken.
// The caller gives it back with releaseExport.
func (s *Server) takeExport() bool {
	s.exportsOnce.Do(func() {
		n := s.MaxExports
		if n <= 0 {
			n = DefaultMaxExports
		}
		s.exports = make(chan struct{}, n)
	})
	select {
	case s.exports <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Server) releaseExport() { <-s.exports }

// callsExport answers GET /api/v1/calls/export: the stored calls that the
// parameters select, in time order, as call records (capture-format.md §1,
// NDJSON), one page of the store at a time, so that the answer streams in
// bounded memory. A store that fails once the answer has begun aborts the
// connection: the client reads a body that breaks off, never one that
// looks complete.
func (s *Server) callsExport(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, exportParams...)
	if !ok {
		return
	}
	q := audit.CallQuery{Tenant: tenant, Server: p.str("server"), Session: p.str("session"),
		Since: p.time("since"), Until: p.time("until"), Limit: store.MaxPage}
	if p.err != nil {
		s.fail(w, p.err)
		return
	}
	if !s.takeExport() {
		w.Header().Set("Retry-After", exportRetryAfter)
		writeJSON(w, http.StatusTooManyRequests, Error{fmt.Sprintf(
			"too many exports under way: %d at once at most (serve.connections.max_exports); try again once one ends", cap(s.exports))})
		return
	}
	defer s.releaseExport()
	// StopStreams ends the export: its context ends the store's reads,
	// and its deadline a write that waits for a slow reader.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	d := &streamDeadline{rc: http.NewResponseController(w)}
	defer d.end() // before cancel: the watcher sets no deadline after it
	go func() {
		select {
		case <-s.stopStreams():
			d.stop()
			cancel()
		case <-ctx.Done():
		}
	}()
	started := false
	var line []byte
	for {
		page, err := s.store.Calls(ctx, q)
		if err != nil {
			if !started {
				s.fail(w, err)
				return
			}
			panic(http.ErrAbortHandler)
		}
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		timeout := s.PageTimeout
		if timeout <= 0 {
			timeout = DefaultPageTimeout
		}
		if !d.extend(timeout) {
			panic(http.ErrAbortHandler) // serve stops
		}
		for i := range page.Calls {
			if line, err = capture.AppendRecord(line[:0], &page.Calls[i]); err != nil {
				panic(http.ErrAbortHandler)
			}
			if _, err := w.Write(line); err != nil {
				return // the client went away, or serve stops
			}
		}
		if page.NextCursor == "" {
			return
		}
		d.rc.Flush()
		q.Cursor = page.NextCursor
	}
}

// streamDeadline is the write deadline of a streamed answer: moved ahead
// page by page (extend) until stop sets it to now, so that a write blocked
// on a reader that reads nothing returns at once. end marks the handler
// done: the response's connection may then serve another request, whose
// deadline stop must not touch.
type streamDeadline struct {
	rc *http.ResponseController

	mu            sync.Mutex
	stopped, over bool
}

// extend moves the deadline d ahead of now; false once stopped.
func (s *streamDeadline) extend(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.rc.SetWriteDeadline(time.Now().Add(d))
	return true
}

// stop sets the deadline to now, unless the handler is done.
func (s *streamDeadline) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.over {
		s.stopped = true
		s.rc.SetWriteDeadline(time.Now())
	}
}

// end marks the handler done.
func (s *streamDeadline) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.over = true
}
