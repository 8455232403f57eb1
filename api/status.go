package api

import (
	"net/http"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// StatusResponse is the answer of GET /api/v1/status: where event time
// stands in every partition of the caller's tenant, and which source holds
// each back.
type StatusResponse struct {
	Time time.Time `json:"time"`
	// Queued counts calls acknowledged but not yet handed to the engine.
	Queued int64 `json:"queued"`
	// Judged is true when every call acknowledged so far was judged: none
	// queued, none waiting for its partition's watermark.
	Judged     bool              `json:"judged"`
	Partitions []PartitionStatus `json:"partitions"`
}

// PartitionStatus is one partition (tenant and server).
type PartitionStatus struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
	// Watermark is the event time up to which every call was judged.
	Watermark *time.Time `json:"watermark"`
	// LagSeconds is how far the watermark is behind the wall clock.
	LagSeconds *float64 `json:"lag_seconds"`
	// Buffered counts calls waiting for the watermark.
	Buffered int   `json:"buffered"`
	Calls    int64 `json:"calls"`
	Late     int64 `json:"late"`
	TooLate  int64 `json:"too_late"`
	Ahead    int64 `json:"clock_ahead"`
	// HeldBy names the active source whose clock is the watermark: the
	// one the partition waits for.
	HeldBy  string         `json:"held_by,omitempty"`
	Sources []SourceStatus `json:"sources"`
}

// SourceStatus is one source feeding a partition.
type SourceStatus struct {
	Name       string    `json:"name"`
	LastEvent  time.Time `json:"last_event"`
	LastSeen   time.Time `json:"last_seen"`
	LagSeconds float64   `json:"lag_seconds"`
	Idle       bool      `json:"idle"`
	Calls      int64     `json:"calls"`
	Late       int64     `json:"late"`
	TooLate    int64     `json:"too_late"`
	Ahead      int64     `json:"clock_ahead"`
}

// StatusSource gives the pipeline's status: every partition, and how many
// calls are acknowledged but not yet handed to the engine.
type StatusSource func() (parts []detect.PartitionStatus, queued int64)

var statusParams = []string{"server"}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, statusParams...)
	if !ok {
		return
	}
	if s.Status == nil {
		writeJSON(w, http.StatusNotFound, Error{"no pipeline: this server answers queries only"})
		return
	}
	parts, queued := s.Status()
	out := StatusResponse{Time: p.now, Queued: queued, Judged: queued == 0, Partitions: []PartitionStatus{}}
	server := p.str("server")
	for _, ps := range parts {
		if tenant != "" && ps.Tenant != tenant || server != "" && ps.Server != server {
			continue
		}
		v := PartitionStatus{Tenant: ps.Tenant, Server: ps.Server, Buffered: ps.Buffered, Calls: ps.Calls,
			Late: ps.Late, TooLate: ps.TooLate, Ahead: ps.Ahead, Sources: []SourceStatus{}}
		if !ps.Watermark.IsZero() {
			wm, lag := ps.Watermark, ps.Lag.Seconds()
			v.Watermark, v.LagSeconds = &wm, &lag
		}
		if ps.Buffered > 0 {
			out.Judged = false
		}
		var held *detect.SourceStatus
		for i, src := range ps.Sources {
			v.Sources = append(v.Sources, SourceStatus{Name: src.Name, LastEvent: src.LastEvent, LastSeen: src.LastSeen,
				LagSeconds: src.Lag.Seconds(), Idle: src.Idle, Calls: src.Calls, Late: src.Late, TooLate: src.TooLate, Ahead: src.Ahead})
			if !src.Idle && (held == nil || src.LastEvent.Before(held.LastEvent)) {
				held = &ps.Sources[i]
			}
		}
		if held != nil {
			v.HeldBy = held.Name
		}
		out.Partitions = append(out.Partitions, v)
	}
	writeJSON(w, http.StatusOK, out)
}
