package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// StatusResponse is the answer of GET /api/v1/status: where event time
// stands in every partition of the caller's tenant, and which source holds
// each back.
type StatusResponse struct {
	Time time.Time `json:"time"`
	// Queued counts calls acknowledged but not yet handed to the engine.
	Queued int64 `json:"queued"`
	// Judged is true when nothing acknowledged waits any more: none
	// queued, none waiting for its partition's watermark. Calls too late
	// (TooLate) are not waiting: they were stored and will never be
	// judged.
	Judged bool `json:"judged"`
	// Unstored counts the findings, write states and names of calls
	// counted too late that are judged but not yet stored (the store
	// refused them; they are retried). Judged is false
	// while there are any: what a status calls judged can be read from
	// the store.
	Unstored int `json:"unstored"`
	// TooLate counts, over the partitions shown and those of the tenant
	// and server freed as idle since the start (TooLateFreed), the calls
	// that arrived later than detect.allowed_lateness behind their
	// partition's watermark: stored, counted, not judged. It is what
	// mcpaudit_pipeline_late_calls_total{result="too_late"} counts since
	// the start. Until px19 a partition freed took its calls out of it
	// (live18's defect C: "0 too late" beside a metric of 3).
	TooLate int64 `json:"too_late"`
	// TooLateFreed is the part of TooLate counted in partitions since
	// freed as idle: they have no row in Partitions; their sources' counts
	// are in Sources.
	TooLateFreed int64 `json:"too_late_freed"`
	// TooLateBeforeStart counts the calls of the tenant (every tenant when
	// empty) that the store held as stored too late when this serve
	// started: counted by the runs before it, never judged, and not in
	// TooLate, which counts since the start. Read once at the start
	// (Server.TooLateBeforeStart); 0 when a server is asked for (the store
	// does not keep the server of a call stored too late) or when the
	// store does not keep them. Before sg22 a restart made the status say
	// "0 too late" beside 920 such calls (live22's S2).
	TooLateBeforeStart int64 `json:"too_late_before_start"`
	// FreedDropped counts the partitions freed as idle, of the tenant,
	// whose counts are no longer kept one by one (past detect.FreedKept,
	// the ones freed the longest ago): they are told together under the
	// server detect.OverflowServer, in TooLate and TooLateFreed when no
	// server is asked for. Asked for one server, the counts of it may be
	// among them, and are then missing from TooLate. It counts each
	// partition dropped so, not distinct servers: a server freed again
	// after its counts were dropped, and dropped again, counts again
	// (telling servers apart would take a set of every server dropped,
	// the memory FreedKept bounds).
	FreedDropped int64 `json:"freed_dropped"`
	// PendingWrites counts, over the partitions shown, the judged writes
	// still pending (PartitionStatus.PendingWrites): Judged does not wait
	// for them, and their state may still change.
	PendingWrites int               `json:"pending_writes"`
	Partitions    []PartitionStatus `json:"partitions"`
	// Sources lists every source once, with its counts over all the
	// partitions it feeds.
	Sources []SourceTotals `json:"sources"`
	// Store says whether the store takes and commits what is acknowledged
	// (what GET /readyz answers 503 for): during a ClickHouse outage, or
	// while the embedded store cannot commit its call log, calls are
	// still acknowledged, kept in a spool or log, and committed once the
	// store is back. Absent from a server that does not say.
	Store *StoreStatus `json:"store,omitempty"`
	// LastDowntime is the time serve was down before it started, told
	// for DowntimeShown after the start: calls sent meanwhile arrive only
	// from senders that kept them. Absent when unknown (a new data
	// directory) or once DowntimeShown has passed.
	LastDowntime *Downtime `json:"last_downtime,omitempty"`
	// Downtimes are the last times serve was down that it keeps
	// (pipeline.DowntimesKept), oldest first, each with how the run
	// before it ended. Absent when none is kept.
	Downtimes []Downtime `json:"downtimes,omitempty"`
	// WithdrawalsWaiting counts the withdrawals of stored unverified_write
	// findings (the detector took them back) that the store refused as
	// unavailable and that are retried at every commit, kept in the state
	// file meanwhile: the store shows those findings open until it takes
	// them (docs/runbooks.md#mcpauditwithdrawalswaiting). Part of
	// Unstored. Absent from a server that does not say.
	WithdrawalsWaiting int `json:"withdrawals_waiting,omitempty"`
	// OtherStore is the history left in another store of the data dir,
	// which this server neither reads nor copies (the embedded store's
	// file, after a switch to ClickHouse), counted at the start. Absent
	// when there is none.
	OtherStore *OtherStore `json:"other_store,omitempty"`
	// StateFile is what the start found wrong with the state file
	// (partitions.json): a file set aside, or sources it kept that were
	// not restored one by one. Absent when nothing was, and from a
	// tenant's own status.
	StateFile *StateFileStatus `json:"state_file,omitempty"`
}

// StateFileStatus is what serve's start found wrong with its state file
// (pipeline.StateFileTrouble).
type StateFileStatus struct {
	// SetAside is where a file that could not be read or understood (or
	// of another version) was moved, not overwritten; Reason says why and
	// where in the file; Kept names what of it was read all the same.
	SetAside string   `json:"set_aside,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Kept     []string `json:"kept,omitempty"`
	// SourcesInFile counts the sources the file kept for its partitions;
	// SourcesToOverflow those past detect.max_sources that hold their
	// partition through its overflow source, SourcesDropped the quiet
	// ones left out. Absent when every source was restored.
	SourcesInFile     int `json:"sources_in_file,omitempty"`
	SourcesToOverflow int `json:"sources_to_overflow,omitempty"`
	SourcesDropped    int `json:"sources_dropped,omitempty"`
}

// OtherStore is a store in the data dir that serve does not use.
type OtherStore struct {
	Store string `json:"store"`
	Path  string `json:"path"`
	// Calls and Findings it holds, counted at the start; -1 when they
	// could not be counted.
	Calls    int64 `json:"calls"`
	Findings int64 `json:"findings"`
}

// DowntimeShown is how long after a start the status tells the downtime
// before it.
const DowntimeShown = time.Hour

// Downtime is a time the collector was down: from its previous run's last
// save of its state file (its clean stop, or up to 10 s before a crash) to
// its start.
type Downtime struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Seconds float64   `json:"seconds"`
	// End is how the run before it ended: "stop" (a clean stop), "crash"
	// (it never made its final save: killed, crashed) or "unknown" (a
	// release that did not say).
	End string `json:"end,omitempty"`
	// Note says what the downtime means for the calls of its time, as the
	// page's timelines show it (DowntimeNote).
	Note string `json:"note,omitempty"`
}

// DowntimeOf is d as the API tells it.
func DowntimeOf(d audit.Downtime) Downtime {
	return Downtime{From: d.From, To: d.To, Seconds: d.To.Sub(d.From).Seconds(), End: d.End, Note: DowntimeNote(d)}
}

// DowntimeNote says what a downtime means for the calls of its time, in
// UTC to the second: the marker of the timelines (API, page and
// `mcpaudit timeline`). The date is given once when both ends fall on
// the same day.
func DowntimeNote(d audit.Downtime) string {
	from, to := d.From.UTC(), d.To.UTC()
	end := to.Format("15:04:05")
	if from.Format(time.DateOnly) != to.Format(time.DateOnly) {
		end = to.Format(time.DateTime)
	}
	how := d.End
	if how == "" {
		how = audit.EndUnknown
	}
	if how == audit.EndUnknown {
		how = "how it stopped unknown"
	}
	return fmt.Sprintf("serve was down %s–%s UTC (%s): calls sent then by exporters that do not retry may be missing (docs/runbooks.md#after-serve-was-down)",
		from.Format(time.DateTime), end, how)
}

// StoreStatus is the readiness of the store behind the status.
type StoreStatus struct {
	Ready bool `json:"ready"`
	// Reason is why the store is not ready and what waits meanwhile, as
	// the store says it (ClickHouse: "clickhouse unavailable ...; N
	// batches (B bytes) wait in the spool"). Empty when ready.
	Reason string `json:"reason,omitempty"`
	// DiskFull is set while the store is not ready because its disk is
	// full (a write failed for want of space, ENOSPC): calls it cannot
	// write are refused (503) rather than kept for later.
	DiskFull bool `json:"disk_full,omitempty"`
}

// storeStatus asks store whether it is ready: stores without a Ready
// method always are.
func storeStatus(store audit.Store) *StoreStatus {
	rd, ok := store.(interface{ Ready() error })
	if !ok {
		return &StoreStatus{Ready: true}
	}
	if err := rd.Ready(); err != nil {
		return &StoreStatus{Reason: err.Error(), DiskFull: errors.Is(err, syscall.ENOSPC)}
	}
	return &StoreStatus{Ready: true}
}

// PartitionStatus is one partition (tenant and server).
type PartitionStatus struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
	// Watermark is the event time up to which every call was judged.
	Watermark *time.Time `json:"watermark"`
	// LagSeconds is how far the watermark is behind the wall clock.
	LagSeconds *float64 `json:"lag_seconds"`
	// Acknowledged is the latest event time its sources have delivered:
	// every call acknowledged so far is judged (or too late) once the
	// watermark reaches it. Null before any delivery.
	Acknowledged *time.Time `json:"acknowledged"`
	// Buffered counts calls waiting for the watermark.
	Buffered int `json:"buffered"`
	Counts
	// HeldBy names the active source whose clock is the watermark: the
	// one the partition waits for; or an idle one that still holds it at
	// the lag it showed while it delivered (a slow clock). A source further
	// behind the watermark than detect.allowed_lateness holds nothing back
	// and is not named.
	HeldBy  string         `json:"held_by,omitempty"`
	Sources []SourceStatus `json:"sources"`
	// HeldUntil is, for a while after a restart, the wall time until
	// which the watermark stays at or before HeldAt (what the partition's
	// sources had delivered before the stop, less detect.lateness), so
	// that the backlogs their senders retry are judged in time order:
	// clamp(downtime, serve.pipeline.restart_grace, restart_grace_max) +
	// detect.idle_timeout after the start. Calls dated after HeldAt wait
	// until then. Absent when no such hold is in force.
	HeldUntil *time.Time `json:"held_until,omitempty"`
	HeldAt    *time.Time `json:"held_at,omitempty"`
	// OverflowCalls counts the calls of sources the partition had no room
	// for (detect.max_sources, none of its sources quiet), taken under its
	// overflow source (detect.OverflowSource) since the collector started;
	// SourcesDisplaced the quiet sources forgotten to make room for new
	// ones. Absent while 0.
	OverflowCalls    int64 `json:"overflow_calls,omitempty"`
	SourcesDisplaced int64 `json:"sources_displaced,omitempty"`
	// PendingWrites counts the partition's judged writes still pending: a
	// later call may settle them (prove them durable, say), or their
	// verification window (detect.verify_window) ends and makes
	// them unverified. PendingUntil is the event time the last of those
	// windows ends: once the watermark passes it, none judged so far is
	// pending (a window whose source is behind waits for it). Absent when
	// none is pending.
	PendingWrites int        `json:"pending_writes"`
	PendingUntil  *time.Time `json:"pending_until,omitempty"`
	// FallenBehind is set when something waits for the watermark longer than
	// the collector allows for (detect.FallenBehind): calls, with the watermark
	// more than detect.idle_timeout behind the wall clock, or, with no
	// call waiting, pending writes, with it more than
	// detect.allowed_lateness behind. A quiet partition with nothing
	// waiting is not behind, whatever LagSeconds says: its lag is how late
	// its last delivery came. Absent from a serve older than this field.
	FallenBehind bool `json:"behind"`
}

// SourceStatus is where one source feeding a partition stands. Its
// counts are in StatusResponse.Sources, once per source.
type SourceStatus struct {
	Name      string    `json:"name"`
	LastEvent time.Time `json:"last_event"`
	// LastSeen is the wall time of its last delivery; omitted when
	// unknown (a source restored from a state file of an earlier release
	// that has not delivered since the restart).
	LastSeen   time.Time `json:"last_seen,omitzero"`
	LagSeconds float64   `json:"lag_seconds"`
	Idle       bool      `json:"idle"`
	// HoldLagSeconds and HoldUntil, for an idle source that still holds
	// its partition at the lag it showed while it delivered (a slow
	// clock, docs/detection.md#time): that lag, and the wall time its hold
	// ends (later by any time every source of the partition is quiet
	// meanwhile). Omitted otherwise.
	HoldLagSeconds *float64   `json:"hold_lag_seconds,omitempty"`
	HoldUntil      *time.Time `json:"hold_until,omitempty"`
	// Overflow is set on the partition's overflow source, which takes the
	// calls of the sources it had no room for (detect.max_sources).
	Overflow bool `json:"overflow,omitempty"`
}

// SourceTotals is one source with its counts over every partition
// (server) it feeds.
type SourceTotals struct {
	Tenant  string   `json:"tenant"`
	Name    string   `json:"name"`
	Servers []string `json:"servers"`
	Counts
	// TooLateSenders, on an overflow source (detect.OverflowSource), names
	// the senders of its latest calls counted too late, the most recent
	// first, each once, at most detect.TooLateSendersKept over the servers
	// it feeds: the calls are stored, and listed, under their senders'
	// names. Absent otherwise.
	TooLateSenders []string `json:"too_late_senders,omitempty"`
}

// Counts counts the calls of a partition, or of a source over every
// partition (server) it feeds.
type Counts struct {
	// Calls counts calls delivered; Late those judged behind the
	// watermark; TooLate those later than detect.allowed_lateness behind
	// it, stored and not judged; Ahead those dated beyond the allowed
	// clock skew. Behind counts those of TooLate whose source never
	// delivered a call dated within detect.max_clock_lag of its arrival (a
	// clock that slow), where the rest came from a source once current (a
	// backlog delivered late).
	Calls   int64 `json:"calls"`
	Late    int64 `json:"late"`
	TooLate int64 `json:"too_late"`
	Ahead   int64 `json:"clock_ahead"`
	Behind  int64 `json:"clock_behind"`
	// IDCollisions counts calls not judged because a different call came
	// under the same trace and span id (stored), or another response under
	// the same call id (not stored: the store keeps one per id)
	// (detect.Collision); for a source, those its deliveries revealed.
	IDCollisions int64 `json:"id_collisions"`
	// TooLateFrom and TooLateTo span the event times of the calls counted
	// too late since the collector started: stored, never judged, so the
	// findings they take part in may be missing. Absent when there are
	// none.
	TooLateFrom *time.Time `json:"too_late_from,omitempty"`
	TooLateTo   *time.Time `json:"too_late_to,omitempty"`
}

// add adds the engine's counts c, and widens the span to hold c's.
func (t *Counts) add(c *detect.Counts) {
	t.Calls += c.Calls
	t.Late += c.Late
	t.TooLate += c.TooLate
	t.Ahead += c.Ahead
	t.Behind += c.Behind
	t.IDCollisions += c.IDCollisions
	sp := c.TooLateSpan()
	if t.TooLateFrom != nil {
		sp.Merge(detect.Span{From: *t.TooLateFrom, To: *t.TooLateTo})
	}
	t.TooLateFrom, t.TooLateTo = spanTimes(sp)
}

// StatusSource gives the pipeline's status: every partition, how many
// calls are acknowledged but not yet handed to the engine, and how many
// findings and write states are judged but not stored.
type StatusSource func() (parts []detect.PartitionStatus, queued int64, unstored int)

var statusParams = []string{"server"}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	p, tenant, ok := s.newParams(w, r, statusParams...)
	if !ok {
		return
	}
	out, ok := s.StatusOf(tenant, p.str("server"), p.now)
	if !ok {
		writeJSON(w, http.StatusNotFound, Error{"no pipeline: this server answers queries only"})
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// StatusOf returns the answer of GET /api/v1/status for tenant (empty:
// every tenant) and server (empty: every server) at now, and false when
// this server has no pipeline (Status is nil).
func (s *Server) StatusOf(tenant, server string, now time.Time) (StatusResponse, bool) {
	if s.Status == nil {
		return StatusResponse{}, false
	}
	parts, queued, unstored := s.Status()
	return s.StatusOfParts(parts, queued, unstored, tenant, server, now), true
}

// StatusOfParts is StatusOf over an answer of the pipeline already taken
// (parts, queued and unstored, as Status gives them), for a caller that
// needs the partitions too: the page, whose status lines and bar are built
// from one ask (each ask drains the pipeline's queue and ticks the engine).
func (s *Server) StatusOfParts(parts []detect.PartitionStatus, queued int64, unstored int, tenant, server string, now time.Time) StatusResponse {
	out := StatusFrom(parts, queued, unstored, tenant, server, now)
	if s.Freed != nil {
		AddFreed(&out, s.Freed(), tenant, server)
	}
	if s.TooLateBeforeStart != nil && server == "" {
		out.TooLateBeforeStart = s.TooLateBeforeStart(tenant)
	}
	out.Store = storeStatus(s.store)
	if tenant == "" || tenant == "*" {
		out.OtherStore = s.OtherStore
		out.StateFile = s.StateFile
	}
	if s.WithdrawalsWaiting != nil {
		out.WithdrawalsWaiting = s.WithdrawalsWaiting(tenant)
	}
	if s.Downtime != nil {
		if from, to := s.Downtime(); !to.IsZero() && now.Before(to.Add(DowntimeShown)) {
			out.LastDowntime = &Downtime{From: from, To: to, Seconds: to.Sub(from).Seconds()}
		}
	}
	if s.Downtimes != nil {
		ds := s.Downtimes()
		if n := len(ds); n > 0 && out.LastDowntime != nil && ds[n-1].To.Equal(out.LastDowntime.To) {
			out.LastDowntime.End, out.LastDowntime.Note = ds[n-1].End, DowntimeNote(ds[n-1])
		}
		for _, d := range ds {
			out.Downtimes = append(out.Downtimes, DowntimeOf(d))
		}
	}
	return out
}

// StatusFrom is what StatusOfParts takes from the pipeline's answer alone
// (parts, queued and unstored, as StatusSource gives them): the partitions,
// the sources and the counts, before what the Server adds.
func StatusFrom(parts []detect.PartitionStatus, queued int64, unstored int, tenant, server string, now time.Time) StatusResponse {
	out := StatusResponse{Time: now, Queued: queued, Unstored: unstored, Judged: queued == 0 && unstored == 0, Partitions: []PartitionStatus{}, Sources: []SourceTotals{}}
	totals := map[[2]string]int{} // (tenant, name) -> index in out.Sources
	for _, ps := range parts {
		if tenant != "" && ps.Tenant != tenant || server != "" && ps.Server != server {
			continue
		}
		v := partitionStatus(ps)
		if ps.Buffered > 0 {
			out.Judged = false
		}
		out.TooLate += ps.TooLate
		out.PendingWrites += ps.Pending
		out.Partitions = append(out.Partitions, v)
		addSources(&out, totals, &ps)
	}
	return out
}

// addSources adds the sources of partition ps to out.Sources, whose
// entries idx indexes by tenant and source name. The pipeline keeps a
// source's clock and counts per partition (detect.Engine.ClockPerPartition):
// a source is told once, with the sum of its counts over the servers it fed.
func addSources(out *StatusResponse, idx map[[2]string]int, ps *detect.PartitionStatus) {
	for _, src := range ps.Sources {
		k := [2]string{ps.Tenant, src.Name}
		i, seen := idx[k]
		if !seen {
			i = len(out.Sources)
			idx[k] = i
			out.Sources = append(out.Sources, SourceTotals{Tenant: ps.Tenant, Name: src.Name})
		}
		t := &out.Sources[i]
		if !slices.Contains(t.Servers, ps.Server) {
			t.Servers = append(t.Servers, ps.Server)
		}
		t.add(&src.Counts)
		for _, n := range src.TooLateSenders {
			if len(t.TooLateSenders) < detect.TooLateSendersKept && !slices.Contains(t.TooLateSenders, n) {
				t.TooLateSenders = append(t.TooLateSenders, n)
			}
		}
	}
}

// AddFreed adds to out, an answer of StatusFrom for tenant and server
// (empty: all), the counts of the partitions freed as idle since the start
// (freed, as detect.Engine.FreedStatus gives them): to TooLate and
// TooLateFreed, and to the totals of their sources, so that the calls too
// late of a freed partition are still told, with the span of their event
// times, and to FreedDropped how many freed partitions' counts are told together
// (past detect.FreedKept). They get no row in Partitions: they hold no
// watermark.
func AddFreed(out *StatusResponse, freed []detect.PartitionStatus, tenant, server string) {
	idx := map[[2]string]int{}
	for i, t := range out.Sources {
		idx[[2]string{t.Tenant, t.Name}] = i
	}
	for _, ps := range freed {
		if tenant != "" && ps.Tenant != tenant {
			continue
		}
		// Said whichever server is asked for: its counts may be among them.
		out.FreedDropped += ps.FreedDropped
		if server != "" && ps.Server != server {
			continue
		}
		out.TooLate += ps.TooLate
		out.TooLateFreed += ps.TooLate
		addSources(out, idx, &ps)
	}
}

// partitionStatus is the answer's view of one partition: its sources
// without their counts, the one holding it back, and the latest event
// time acknowledged.
func partitionStatus(ps detect.PartitionStatus) PartitionStatus {
	v := PartitionStatus{Tenant: ps.Tenant, Server: ps.Server, Buffered: ps.Buffered, Sources: []SourceStatus{},
		OverflowCalls: ps.OverflowCalls, SourcesDisplaced: ps.SourcesDisplaced}
	v.add(&ps.Counts)
	if !ps.Watermark.IsZero() {
		wm, lag := ps.Watermark, ps.Lag.Seconds()
		v.Watermark, v.LagSeconds = &wm, &lag
	}
	// The engine names the holder: it alone knows which sources are too
	// far behind to hold anything (a pod whose clock is hours slow).
	v.HeldBy = ps.HeldBy
	v.PendingWrites = ps.Pending
	v.FallenBehind = ps.FallenBehind
	if !ps.PendingUntil.IsZero() {
		until := ps.PendingUntil
		v.PendingUntil = &until
	}
	if !ps.HeldUntil.IsZero() {
		until, at := ps.HeldUntil, ps.HeldAt
		v.HeldUntil, v.HeldAt = &until, &at
	}
	for _, src := range ps.Sources {
		ss := SourceStatus{Name: src.Name, LastEvent: src.LastEvent, LastSeen: src.LastSeen,
			LagSeconds: src.Lag.Seconds(), Idle: src.Idle, Overflow: src.Overflow}
		if src.HoldLag > 0 {
			lag, until := src.HoldLag.Seconds(), src.HoldUntil
			ss.HoldLagSeconds, ss.HoldUntil = &lag, &until
		}
		v.Sources = append(v.Sources, ss)
		if !src.LastEvent.IsZero() && (v.Acknowledged == nil || src.LastEvent.After(*v.Acknowledged)) {
			t := src.LastEvent
			v.Acknowledged = &t
		}
	}
	return v
}

// spanTimes returns s as the answer's optional times: absent when empty.
func spanTimes(s detect.Span) (from, to *time.Time) {
	if s.Empty() {
		return nil, nil
	}
	return &s.From, &s.To
}
