// Package pipeline is the live form of the engine. Receivers hand it
// batches of records from named sources; it commits them to the store
// before they are acknowledged, feeds them to the one engine goroutine,
// moves every partition's watermark on with the wall clock (idle sources,
// quiet partitions), commits the engine's output with the watermark it was
// produced at, and rebuilds correlation state from the store after a
// restart.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/memlimit"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

// Errors returned by Ingest. Both wrap audit.ErrOverloaded or are
// permanent, so that receivers tell retryable refusals apart with
// errors.Is.
var (
	// ErrQueueFull is returned when the engine is behind by more than the
	// queue holds; nothing of the batch was stored. Retryable.
	ErrQueueFull = fmt.Errorf("ingest queue full: %w", audit.ErrOverloaded)
	// ErrOpenState is returned when the engine holds the configured
	// maximum of open correlation state or the process nears its memory
	// limit; nothing of the batch was stored. Retryable.
	ErrOpenState = fmt.Errorf("open state at its limit: %w", audit.ErrOverloaded)
	// ErrStopped is returned after Close.
	ErrStopped = errors.New("pipeline stopped")
)

// Config sets the pipeline's limits.
type Config struct {
	// QueueCalls is how many acknowledged calls may wait for the engine
	// before Ingest refuses more. Default 200000.
	QueueCalls int `yaml:"queue_calls"`
	// MaxOpenCalls is how many calls the engine may hold waiting for
	// their partitions' watermarks (a source far behind holds the others'
	// calls) before Ingest refuses more, but for the source a partition
	// waits for, whose calls let the waiting ones go. Once half is taken,
	// each tenant may hold its share: this divided among the tenants with
	// a partition in use. Default 1000000.
	MaxOpenCalls int `yaml:"max_open_calls"`
	// CommitEvery is how often the engine's output is committed and the
	// wall clock moves the watermarks. Default 100ms.
	CommitEvery time.Duration `yaml:"commit_every"`
	// RestartGrace is the shortest time after a restart that the sources
	// that held a partition back (in the state file) still hold it without
	// delivering, before the idle timeout starts, and, with the idle
	// timeout, that such a partition's watermark does not pass what they
	// had delivered before the stop: senders retry after a backoff (the
	// OpenTelemetry SDK and Collector wait up to 30 s ± 50 % between
	// tries), and a Collector's sending queue replays its backlog out of
	// order. Calls wait meanwhile. After a longer stop the grace is the
	// time serve was down, up to restart_grace_max. Default 30s.
	RestartGrace time.Duration `yaml:"restart_grace"`
	// RestartGraceMax caps the grace after a restart, which is the time
	// serve was down (from the state file's last save to the start) when
	// that is longer than restart_grace: a gRPC sender's reconnect backoff
	// grows with the outage, to 2 m ± 20 %, and a Collector's retry adds
	// up to 45 s. 0 keeps the grace at restart_grace whatever the
	// downtime; a restart_grace above it wins. Default 3m.
	RestartGraceMax time.Duration `yaml:"restart_grace_max"`
	// MaxServersPerTenant caps the partitions (servers) of one tenant:
	// calls of a new server past it are refused, per record, until an idle
	// partition is freed. Default 1000.
	MaxServersPerTenant int `yaml:"max_servers_per_tenant"`
	// StateFile, if set, is where the partitions' watermarks are kept
	// between runs (in the data directory).
	StateFile string `yaml:"-"`
	// Store names the store the state file's marks describe ("sqlite",
	// "clickhouse:DB"), written into the file (StateStore reads it) so
	// that a start on another store does not take the marks of this one
	// for its own (op23's D3). Empty writes none.
	Store string `yaml:"-"`
	// FindingLatency, if set, is told for each finding committed the wall
	// time from when it could be known: the acknowledgement of the call
	// that completed its evidence, or (window set) the end of its
	// verification window in event time.
	FindingLatency func(d time.Duration, window bool) `yaml:"-"`
	// StoreReady, if set, is called by New once the store is ready (New
	// waits for a store down at start), before the correlation state is
	// rebuilt and before any call is taken: what the caller reads from
	// the store at start is read then, not while it cannot answer yet
	// (live23's D1).
	StoreReady func(ctx context.Context) `yaml:"-"`
	// Counters, if set with StateFile, keeps counters whose values the
	// state file saves with the marks (exporter/metrics: the findings,
	// calls, failures and write states counters), so that they go on
	// across a restart, a crash included.
	Counters Counters `yaml:"-"`
	// Now is the wall clock; tests set it. Default time.Now.
	Now func() time.Time `yaml:"-"`
	// ticks, when set (tests, export_test.go), replaces the CommitEvery
	// ticker: the engine goroutine commits and moves the watermarks with
	// the wall clock at each value received, and only then, so that a
	// test can put a tick between two of its steps.
	ticks <-chan time.Time
}

// Counters keeps counters that go on across restarts: their values are
// saved in the state file with the partitions' marks, and a count is shown
// only once a save holds it, so that a start, which begins them at the
// saved values, never shows less than a scrape saw before a crash
// (docs/metrics.md, "Counters across restarts"). The pipeline
// calls every method from the engine goroutine but GateOnSave, which New
// calls before any.
type Counters interface {
	// GateOnSave has counts shown only once SaveCounts' publish ran.
	GateOnSave()
	// CountsPending reports whether counts wait for a save.
	CountsPending() bool
	// SaveCounts returns the values to save, and publish, called once the
	// state file is written (or could not be: a count is not kept from
	// view for a failing disk). With full, every value; else only those
	// changed since the last call (nil when none did), to apply on top
	// of the values before.
	SaveCounts(full bool) (values json.RawMessage, publish func())
	// RestoreCounts begins the counters at values saved by an earlier
	// run, before the replay at start: a full save's, and each save's
	// after it in order.
	RestoreCounts(values ...json.RawMessage) error
	// RecountFinding counts a finding the store holds that the replay
	// made again after its partition's saved mark: the run before counted
	// it after the values were saved, and its count was lost with it.
	RecountFinding(f *audit.Finding)
	// SkipCounts, while set, has the calls and writes told to the sinks
	// counted nowhere the values restored hold them: the replay judges
	// again calls judged at or before their partition's saved mark.
	SkipCounts(skip bool)
}

// NewDefaultConfig returns the defaults.
func NewDefaultConfig() Config {
	return Config{QueueCalls: 200_000, MaxOpenCalls: 1_000_000, CommitEvery: 100 * time.Millisecond, RestartGrace: 30 * time.Second, RestartGraceMax: 3 * time.Minute,
		MaxServersPerTenant: 1000}
}

// Validate checks the limits.
func (c *Config) Validate() error {
	var errs []error
	if c.QueueCalls <= 0 {
		errs = append(errs, errors.New("queue_calls: must be positive"))
	}
	if c.MaxOpenCalls <= 0 {
		errs = append(errs, errors.New("max_open_calls: must be positive"))
	}
	if c.CommitEvery <= 0 {
		errs = append(errs, errors.New("commit_every: must be positive"))
	}
	if c.MaxServersPerTenant <= 0 {
		errs = append(errs, errors.New("max_servers_per_tenant: must be positive"))
	}
	if c.RestartGrace < 0 {
		errs = append(errs, errors.New("restart_grace: must not be negative"))
	}
	if c.RestartGraceMax < 0 {
		errs = append(errs, errors.New("restart_grace_max: must not be negative"))
	}
	return errors.Join(errs...)
}

// Pipeline is safe for concurrent use by receivers.
type Pipeline struct {
	cfg   Config
	dcfg  detect.Config
	store audit.Store
	log   *slog.Logger
	// rlog says what repeats at each tick (a commit the store refuses) a
	// few times a minute, with how many it left out.
	rlog *ratelog.Logger
	now  func() time.Time
	// downFrom and downTo are the last downtime, set once by recover:
	// from the previous run's last save of the state file to this start.
	// Zero when unknown.
	downFrom, downTo time.Time
	// downtimes are the last DowntimesKept downtimes, oldest first, set
	// once by recover; the state file keeps them.
	downtimes []audit.Downtime

	queue chan queued
	// touches carries the sources whose deliveries were refused to the
	// engine goroutine: they are not quiet (Engine.Touch).
	touches  chan touch
	inflight atomic.Int64 // calls stored but not yet handed to the engine
	open     atomic.Int64 // calls the engine holds for their watermarks

	// Owned by the engine goroutine.
	eng  *detect.Engine
	gate *gate

	statusMu sync.Mutex
	status   []detect.PartitionStatus
	statusAt time.Time // when status was taken (p.now)
	// freedStatus is the engine's FreedStatus as of status, for Freed.
	freedStatus []detect.PartitionStatus
	statusReq   chan chan statusReply

	// floorMu guards what the state file holds and what it must cover:
	// the partitions' marks and floor last saved, and the earliest call
	// (Unix nanoseconds) of each batch queued for the engine, with counts.
	floorMu    sync.Mutex
	savedMarks map[detect.PartitionKey]mark
	// freed holds the partitions freed as idle whose calls the replay at
	// start may still reach (markFile.Freed); freedChanged is set while
	// the file does not say what freed holds.
	freed        map[detect.PartitionKey]freedMark
	freedChanged bool
	// unstoredWithdrawals holds the withdrawals the store refused
	// (audit.ErrUnavailable), kept for the next commit (gate.withdrawn):
	// every write of the state file keeps them (markFile.Withdrawals);
	// withdrawalsChanged is set while the file does not say what it holds.
	unstoredWithdrawals []audit.FindingChange
	// trouble is what the start found wrong with the state file (nil
	// when nothing was): set by recover, read-only after.
	trouble            *StateFileTrouble
	withdrawalsChanged bool
	// waitLogged holds the ids of the withdrawals the store refused whose
	// wait was logged (withdraw; the last run's, kept in the state file,
	// at the start): once per withdrawal, not per retry. Engine goroutine
	// only.
	waitLogged map[string]bool
	// stale holds the partitions the file on disk keeps as freed that freed
	// no longer holds (the replay at start made them again): the file must
	// drop them before a call of them is stored (comeback). arriving
	// counts, per partition, the requests between comeback and lowerFloor:
	// a partition freed meanwhile is not kept as freed (free).
	stale    map[detect.PartitionKey]bool
	arriving map[detect.PartitionKey]int
	// doubted holds the partitions a failed append may have stored calls
	// of all the same (a ClickHouse insert goes on when its caller stops
	// waiting): calls never covered by the floor nor judged, so none of
	// these partitions is kept as freed for the rest of the run (free).
	doubted    map[detect.PartitionKey]bool
	marksSaved time.Time
	// marksCurrent is the wall time saveMarks last found the file to hold
	// the engine's marks: it wrote them then, or they had not changed
	// since it last did (the file is not rewritten for that before
	// stateRefresh). Tests read it (export_test.go) to know that a crash
	// now leaves the marks of now.
	marksCurrent time.Time
	floor        time.Time
	queued       map[int64]int
	// stateWarned is when a failure to write the state file was last
	// logged: at most once a minute.
	stateWarned time.Time
	// cleanStop is set for the save of the clean stop: the file says the
	// run stopped (markFile.Run).
	cleanStop bool
	// savedCountsLog names the counters' values the state file keeps
	// with savedMarks (Config.Counters; markFile.CountersLog): a write of
	// the file that keeps savedMarks keeps it too, as a pair. counts is
	// the journal the saves write to (nil until the first).
	savedCountsLog *countsRef
	counts         *countLog

	admit admission
	load  tenantLoad

	mu      sync.Mutex
	stopped bool
	done    chan struct{}
	cancel  context.CancelFunc
}

// New builds a pipeline over store, rebuilds correlation state from it and
// starts the engine goroutine. Sinks receive the engine's new output (not
// what is replayed at start and was committed before).
func New(ctx context.Context, cfg Config, dcfg detect.Config, store audit.Store, log *slog.Logger, sinks ...audit.Sink) (*Pipeline, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StateFile == "" {
		// Nothing to save them in: counts are shown at once.
		cfg.Counters = nil
	}
	if cfg.Counters != nil {
		cfg.Counters.GateOnSave()
	}
	p := &Pipeline{
		cfg: cfg, dcfg: dcfg, store: store, log: log, now: cfg.Now,
		queue:     make(chan queued, 1024),
		touches:   make(chan touch, 256),
		done:      make(chan struct{}),
		statusReq: make(chan chan statusReply),
		queued:    map[int64]int{},
		freed:     map[detect.PartitionKey]freedMark{},
		stale:     map[detect.PartitionKey]bool{},
		arriving:  map[detect.PartitionKey]int{},
		load:      tenantLoad{queued: map[string]int64{}, open: map[string]int64{}},
	}
	p.rlog = ratelog.New(log, ratelog.NewDefaultConfig())
	p.gate = newGate(sinks, cfg.FindingLatency)
	p.eng = detect.NewEngine(dcfg, p.gate)
	// An exporter or poster that sends several servers holds each back only
	// by what it delivered for it (docs/detection.md, "Sources").
	p.eng.ClockPerPartition()
	p.eng.ReplaySource(recoverySource)
	// A lagging exporter keeps tens of thousands of calls waiting for
	// their watermark: they wait packed, in a quarter of the memory.
	p.eng.PackWaiting()
	// The store refuses stored ids; the engine drops a call re-sent while
	// it could still be judged (a re-send after a lost acknowledgement,
	// a replay after a restart).
	p.gate.eng = p.eng
	p.eng.OnCollision(p.collision)
	p.eng.OnTooLate(p.gate.tooLateCall)
	p.eng.OnAnswer(p.gate.answeredCall)
	p.eng.OnJudged(p.gate.judged)
	if err := waitReady(ctx, store, log); err != nil {
		return nil, err
	}
	if cfg.StoreReady != nil {
		cfg.StoreReady(ctx)
	}
	if err := p.recover(ctx); err != nil {
		return nil, err
	}
	p.seedAdmission()
	p.updateStatus()
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(runCtx)
	return p, nil
}

// readyEvery is how often waitReady asks an unavailable store again.
const readyEvery = 200 * time.Millisecond

// waitReady waits, when the store says whether it is ready (the ClickHouse
// store does), until it is: the correlation state is rebuilt from what it
// holds, which a store down at start (ClickHouse stopped, acknowledged
// calls still in its spool) cannot give yet. Meanwhile nothing is
// acknowledged: senders retry. It returns ctx's error if ctx ends first,
// and any other error of the store's at once.
func waitReady(ctx context.Context, store audit.Store, log *slog.Logger) error {
	rd, ok := store.(interface{ Ready() error })
	if !ok {
		return nil
	}
	logged := false
	for {
		err := rd.Ready()
		if err == nil {
			if logged {
				log.Info("the store is ready; rebuilding the correlation state")
			}
			return nil
		}
		if !errors.Is(err, audit.ErrUnavailable) {
			return fmt.Errorf("cannot start: %w", err)
		}
		if !logged {
			log.Warn("the store is unavailable at start; waiting for it before rebuilding the correlation state (nothing is acknowledged meanwhile)", "err", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot start: the store stayed unavailable: %w", ctx.Err())
		case <-time.After(readyEvery):
		}
	}
}

// expireEvery is how often idle partitions are looked for.
const expireEvery = 10 * time.Second

// recoverySource names the stream of calls replayed from the store. The
// engine keeps its clock per partition (ClockPerPartition), so one
// partition's replayed calls (dated ahead and clamped to the skew, say)
// do not move the others.
const recoverySource = "mcpaudit/recovery"

// replayReach is how far before a mark a replayed call can still make
// output (correlation_window + verify_window + allowed_lateness +
// lateness): the replay's horizon, and the reach of a freed partition's
// calls before the floor.
func (p *Pipeline) replayReach() time.Duration {
	return p.dcfg.CorrelationWindow + p.dcfg.VerifyWindow + p.dcfg.AllowedLateness + p.dcfg.Lateness
}

// maxSeedCalls bounds the calls of freed partitions the replay holds
// while it looks for a call of theirs from the floor on (recover): lean
// records of a few hundred bytes, tens of MB (estimated). A variable for
// tests.
var maxSeedCalls = 100_000

// StateFileTrouble returns what the start found wrong with the state file:
// a file set aside (not understood, or of another version) and why, and
// sources it kept that were not restored one by one; nil when nothing was.
func (p *Pipeline) StateFileTrouble() *StateFileTrouble {
	if p.trouble == nil {
		return nil
	}
	t := *p.trouble
	t.Kept = slices.Clone(t.Kept)
	return &t
}

// recover replays the stored calls that correlation state after the
// committed watermarks can depend on, judging them again in time order.
// What they caused up to each partition's watermark was committed before
// the stop: those calls and write states are not told again, and findings
// already stored are recognized by their ids.
func (p *Pipeline) recover(ctx context.Context) error {
	wm, err := p.store.Watermark(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the watermark: %w", err)
	}
	marks, freed, floor, saved, lost, run := readMarks(p.cfg.StateFile, p.now(), p.log)
	clampAhead(marks, p.now(), p.dcfg.MaxClockSkew, p.log)
	saved = savedBefore(saved, p.now(), p.dcfg.MaxClockSkew, p.cfg.StateFile, p.log)
	if !lost && p.cfg.StateFile != "" && marks == nil && !wm.IsZero() {
		// The store holds output, so the file was written (before the
		// first call was acknowledged) and is gone.
		lost = true
	}
	// The replay reaches back from the earliest watermark, call still
	// waiting or call acknowledged before it was judged (the floor), by
	// everything a call after it can correlate with; without any mark
	// (nothing was ever committed), from the first stored call.
	from := wm
	if !floor.IsZero() && (from.IsZero() || floor.Before(from)) {
		from = floor
	}
	// What the file keeps, written again as it is by a write before the
	// first save (lowerFloor, comeback).
	p.floor, p.savedMarks, p.savedCountsLog = floor, marks, run.countsLog
	// The counters go on from the values saved with the marks, before the
	// replay counts anything; what it makes after the marks is counted
	// again, stored or not (gate.recount): the run before counted it
	// after those values were saved.
	var counts []json.RawMessage
	var countsErr error
	switch {
	case p.cfg.Counters == nil:
	case run.countsLog != nil:
		counts, countsErr = readCountLog(p.cfg.StateFile, run.countsLog)
	case len(run.counts) > 0:
		// A file of rcn49's release: the values in it.
		counts = []json.RawMessage{run.counts}
	}
	if countsErr == nil && len(counts) > 0 {
		countsErr = p.cfg.Counters.RestoreCounts(counts...)
	}
	if countsErr != nil {
		p.log.Warn("the state file's counters cannot be read: the findings, calls and write states counters start at 0 (Prometheus reads a reset)",
			"path", p.cfg.StateFile, "err", countsErr)
	}
	if countsErr == nil && len(counts) > 0 {
		// The calls and writes the replay judges again that the run
		// before judged before its last save are not counted again;
		// with the marks lost, none it replays.
		p.gate.skipCounts = p.cfg.Counters.SkipCounts
		p.gate.countedAll = lost
		if !lost {
			p.gate.recount = p.cfg.Counters.RecountFinding
		}
	}
	committed, deferred := map[detect.PartitionKey]time.Time{}, map[detect.PartitionKey]time.Time{}
	for k, m := range marks {
		committed[k] = m.Watermark
		if !m.Deferred.IsZero() {
			deferred[k] = m.Deferred
		}
		// A deferred window's write is a verify window before its end.
		for _, t := range []time.Time{m.Watermark, m.Waiting, m.Deferred} {
			if !t.IsZero() && (from.IsZero() || t.Before(from)) {
				from = t
			}
		}
	}
	var horizon time.Time
	switch {
	case lost:
		// Without the file, how far back calls were acknowledged and not
		// judged (a backlog just before the stop) is unknown: every stored
		// call is judged again. Findings are recognized by their ids; write
		// states are stored over themselves.
		p.log.Warn("the state file is missing or damaged while the store holds output: judging every stored call again (this may take a while)",
			"path", p.cfg.StateFile)
	case !from.IsZero():
		horizon = from.Add(-p.replayReach())
	}
	known, err := p.store.FindingIDs(ctx, horizon)
	if err != nil {
		return fmt.Errorf("cannot read stored findings: %w", err)
	}
	// The calls the live run counted too late were not judged: the replay
	// passes over them too, so that a restart does not judge what the run
	// before it left alone (a read settling a write stored pending, a
	// failure changing the SLO). Not counted as too late again: the
	// counters count what the replay judges or meets late, and these it
	// does not take at all (docs/detection.md, "Restarts").
	// Calls the store does not name (stored too late before the upgrade
	// that keeps them, or counted just before a crash, whose commit never
	// came; every call, from a store that keeps none, audit.ErrUnsupported)
	// are judged, as before; the gate's read of the writes stored pending
	// still covers a write they settle.
	refs, err := p.store.TooLateCalls(ctx, horizon)
	if err != nil && !errors.Is(err, audit.ErrUnsupported) {
		return fmt.Errorf("cannot read the calls stored as too late: %w", err)
	}
	var tooLate map[audit.CallRef]bool
	if len(refs) > 0 {
		tooLate = make(map[audit.CallRef]bool, len(refs))
		for _, c := range refs {
			tooLate[audit.CallRef{Tenant: c.Tenant, ID: c.ID}] = true
		}
	}
	// The answers the store keeps aside that no commit named (review
	// rev18l, D3): the process may have died after one was acknowledged
	// and merged, before the commit naming it. The sender does not send
	// it again, so the replay hands each to the engine right after its
	// call, when no mark covers the call (its judgement was never
	// committed), as the live run had it; the engine merges it and the
	// next commit names the call (audit.Results.Answered). One of a call a
	// mark covers stays aside: the live run judged the call without it.
	var aside map[audit.CallRef]*audit.Record
	if k, ok := p.store.(audit.AnswerKeeper); ok {
		recs, err := k.AnswersAside(ctx, horizon)
		if err != nil && !errors.Is(err, audit.ErrUnsupported) {
			return fmt.Errorf("cannot read the answers kept aside: %w", err)
		}
		if len(recs) > 0 {
			aside = make(map[audit.CallRef]*audit.Record, len(recs))
			for i := range recs {
				aside[audit.CallRef{Tenant: recs[i].Call.Tenant, ID: recs[i].Call.ID}] = &recs[i]
			}
		}
	}
	// answerCovered reports whether the live run judged c without the
	// answer kept aside for it for good: its judgement was committed before
	// the stop (its partition's mark covers it, or, without the state
	// file, the store's watermark does) and the answer, which came after
	// that commit, was later than allowed_lateness behind the watermark
	// (the engine's own test, the mark standing for the watermark). An
	// answer within allowed_lateness of the mark the live run judged with
	// the call (detector.answerLate, fx20a), or would have had the
	// process not died before the commit naming it: the replay judges the
	// call with it, as in order.
	answerCovered := func(c *audit.Call, by time.Duration) bool {
		if m, ok := marks[detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}]; ok {
			return c.Time.Before(m.Watermark.Add(-by))
		}
		return lost && !wm.IsZero() && c.Time.Before(wm.Add(-by))
	}
	p.gate.recovering(wm, committed, deferred, known)
	p.eng.OnDuplicate(p.gate.duplicate)
	p.gate.storedWrite = p.storedWrite
	p.gate.pendingWrites = p.pendingWrites
	// The sources that held each partition back are known again before
	// the replay, so that no watermark jumps to its fastest source. Their
	// grace grows with the time the collector was down: so does their
	// senders' backoff.
	grace, down := restartGrace(p.cfg, saved, p.now())
	p.downtimes = validDowntimes(run.downtimes, p.cfg.StateFile, p.log)
	// Withdrawals the last run could not store: tried again at the first
	// commit, and kept in the file until the store takes them.
	p.unstoredWithdrawals = run.withdrawals
	if len(run.withdrawals) > 0 {
		p.gate.withdrawn = append(p.gate.withdrawn, run.withdrawals...)
		p.gate.carried = map[string]bool{}
		p.waitLogged = map[string]bool{}
		for _, c := range run.withdrawals {
			p.gate.carried[c.FindingID] = true
			p.waitLogged[c.FindingID] = true
		}
		p.log.Warn("withdrawals of stored unverified_write findings that the last run's store refused are tried again at the first commit; "+
			"the store shows those findings open until it takes them (docs/runbooks.md#mcpauditwithdrawalswaiting)", "withdrawals", len(run.withdrawals))
	}
	if down >= 0 {
		p.downFrom, p.downTo = saved, p.now()
		end := audit.EndUnknown
		switch run.run {
		case runRunning:
			end = audit.EndCrash
		case runStopped:
			end = audit.EndStop
		}
		p.downtimes = append(p.downtimes, audit.Downtime{From: saved.UTC(), To: p.downTo.UTC(), End: end})
		if n := len(p.downtimes) - DowntimesKept; n > 0 {
			p.downtimes = slices.Clone(p.downtimes[n:])
		}
		// A short message, the details as fields: one ~600-character
		// message buried the times at the end of the line (op23 D14).
		p.log.Warn("serve was down: calls sent meanwhile may be missing",
			"from", saved.UTC().Format(time.RFC3339), "to", p.downTo.UTC().Format(time.RFC3339), "downtime", down, "end", end,
			"senders", "only those that kept their calls send them again now",
			"otlptracehttp", "does not retry a refused connection: spans exported while serve was down are lost, however short the downtime",
			"otlptracegrpc", "retries for at most 10 s: it bridges a downtime of a few seconds at most",
			"runbook", "docs/runbooks.md#after-serve-was-down")
	}
	// A hold the last run had in force when it saved the file (a crash
	// during it) goes on: its sources hold the partition until its end,
	// when that is later than what this downtime gives (carriedHold), and
	// for the grace the outage their senders saw gives (carriedGrace).
	p.trouble = run.trouble
	var inFile, toOverflow, dropped, partsShort int
	for k, m := range marks {
		g := grace
		if end := p.carriedHold(m); !end.IsZero() {
			g = max(p.carriedGrace(m, grace), end.Sub(p.now())-p.dcfg.IdleTimeout)
		}
		short := false
		for _, src := range m.Sources {
			inFile++
			if !p.eng.RestoreSource(k, src, p.now(), g) {
				toOverflow++
				short = true
			}
		}
		// Quiet at the stop, still holding at a slow clock's lag: quiet
		// still, they hold as they did.
		for _, src := range m.Quiet {
			inFile++
			if !p.eng.RestoreQuietSource(k, src, p.now()) {
				dropped++
				short = true
			}
		}
		if short {
			partsShort++
		}
	}
	if toOverflow+dropped > 0 {
		// Said once, with the counts: the partitions go on, but the
		// sources left out are no longer told apart (found by adv46: a
		// file of 100,000 sources kept 1,000 and the overflow silently).
		p.log.Warn("the state file keeps more sources per partition than detect.max_sources: the first of each partition's are restored, "+
			"the delivering ones left out hold it through its overflow source for their grace, the quiet ones left out are dropped (docs/detection.md, Sources)",
			"path", p.cfg.StateFile, "partitions", partsShort, "sources_in_file", inFile, "restored", inFile-toOverflow-dropped,
			"to_overflow", toOverflow, "dropped", dropped, "max_sources", p.dcfg.MaxSources)
		if p.trouble == nil {
			p.trouble = &StateFileTrouble{}
		}
		p.trouble.SourcesInFile, p.trouble.SourcesToOverflow, p.trouble.SourcesDropped = inFile, toOverflow, dropped
	}
	start := p.now()
	n, skipped, seeded, skippedLate, answers := 0, 0, 0, 0, 0
	// covered keeps, per freed partition whose watermark is at or after the
	// floor, the calls of it the file covers that a call of it from the
	// floor on can correlate with (reach before the floor), until the
	// replay comes to such a call; then they are replayed first, silently
	// (gate.seed). A partition with no call from the floor on keeps none.
	// They are kept lean, at most maxSeedCalls in all.
	var covered map[detect.PartitionKey][]*audit.Record
	var unseeded map[detect.PartitionKey]bool
	nCovered := 0
	reach := p.replayReach()
	add := func(r *audit.Record) {
		n++
		p.gate.replaying(r.Call)
		p.eng.Add(recoverySource, r, p.now())
	}
	err = p.store.ScanCalls(ctx, horizon, func(r *audit.Record) error {
		k := detect.PartitionKey{Tenant: r.Call.Tenant, Server: r.Call.Server}
		if tooLate != nil && tooLate[audit.CallRef{Tenant: r.Call.Tenant, ID: r.Call.ID}] {
			skippedLate++
			return nil
		}
		// A partition freed as idle was judged and committed up to its
		// watermark, and its state dropped: its calls up to there are not
		// judged again. Replayed, they opened windows that the partition's
		// first call after the restart closed, and their output was
		// announced and stored again, a double application's second
		// attempt stored as durable when the replay began after its first
		// (found from outside, live13b). A call of it stored after the
		// freeing had the file drop it first (comeback); one acknowledged
		// just before the engine freed its partition is covered by the
		// floor alone, and is judged (freedCovers; found by review13h).
		if wm, ok := freed[k]; ok && freedCovers(wm, floor, r.Call.Time) {
			switch {
			case p.gate.seeding(k):
				seeded++
				add(r)
			case !floor.IsZero() && !wm.Before(floor) && !r.Call.Time.Before(floor.Add(-reach)) && !unseeded[k]:
				if covered == nil {
					covered = map[detect.PartitionKey][]*audit.Record{}
				}
				covered[k] = append(covered[k], r.Lean())
				if nCovered++; nCovered > maxSeedCalls {
					// Past the bound the partition holding the most is
					// passed over as before, judged from the floor on alone.
					var most detect.PartitionKey
					for pk, recs := range covered {
						if len(recs) > len(covered[most]) {
							most = pk
						}
					}
					nCovered -= len(covered[most])
					skipped += len(covered[most])
					delete(covered, most)
					if unseeded == nil {
						unseeded = map[detect.PartitionKey]bool{}
					}
					unseeded[most] = true
				}
			default:
				skipped++
			}
			return nil
		}
		// The calls of a freed partition judged again (from the floor on)
		// are judged with the calls before the floor they correlate with,
		// replayed first with their output dropped: judged alone, the
		// second attempt of a double application whose first lies before
		// the floor was stored over its double_applied row as unverified,
		// and a false unverified_write stored (review rev14a).
		if recs, ok := covered[k]; ok {
			delete(covered, k)
			nCovered -= len(recs)
			p.gate.seed(k, freed[k], floor)
			for _, h := range recs {
				seeded++
				add(h)
			}
		}
		add(r)
		if aside != nil && !r.Call.Responded {
			ref := audit.CallRef{Tenant: r.Call.Tenant, ID: r.Call.ID}
			if a := aside[ref]; a != nil {
				delete(aside, ref)
				if !answerCovered(r.Call, p.eng.Config().AllowedLateness) {
					answers++
					// Judged from it now: an unverified_write the store
					// holds for a write it settles disagrees with this
					// judgement, whether a mark covers the call (the
					// live run took it and died before the commit
					// naming it) or not (the file saved before the
					// commit that stored the finding: review rev21f).
					p.gate.answerAtRestart(a.Call)
					p.gate.replaying(a.Call)
					p.gate.answerHeld(a.Call)
					p.eng.Add(recoverySource, a, p.now())
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot replay stored calls: %w", err)
	}
	for _, recs := range covered {
		skipped += len(recs)
	}
	covered = nil
	n -= seeded
	// Every call up to a partition's mark was judged, and its windows
	// closed, before the stop: the watermark goes on from there, not from
	// the last replayed call (a quiet partition had moved on with the wall
	// clock past it).
	for k, m := range marks {
		p.eng.RestoreWatermark(k, m.Watermark, m.At)
	}
	// A freed partition the replay did not make stays freed for the next
	// restart, tied to the engine's count of partitions: one of its key
	// made later was begun anew by a call of this run (pruneFreed). One
	// the replay made (a call of it it did not pass over: from the floor
	// on) has its own mark from the next save on and is kept freed no
	// longer, in doubt, its output announced again; the file keeps it
	// until then (stale).
	p.floorMu.Lock()
	for k, t := range freed {
		if _, ok := p.eng.Gen(k); ok {
			p.stale[k] = true
			continue
		}
		p.freed[k] = freedMark{wm: t, gen: p.eng.Made(), disk: true}
	}
	p.floorMu.Unlock()
	// The partitions whose sources were delivering when the collector
	// stopped judge what those sources had delivered, and wait for the
	// rest, their senders' retries, which may bring the backlog out of
	// order (detect.Engine.HoldAfterRestart), for as long as a restored
	// source holds its partition without delivering.
	// A partition the last run held when it saved the file (killed during
	// the hold of an earlier restart, its senders' backlog still coming)
	// holds at that hold's mark, not at its sources' clocks, which the
	// part of the backlog delivered first (the rest of a sender's queue,
	// taken at once) moved past it, and until the later of that hold's
	// end and this one's (found from outside, out24 D1).
	hold := p.now().Add(grace + p.dcfg.IdleTimeout)
	held, carried := 0, 0
	var carriedUntil time.Time
	for k, m := range marks {
		var at time.Time
		for i, src := range m.Sources {
			if i == 0 || src.Clock.Before(at) {
				at = src.Clock
			}
		}
		until := hold
		end := p.carriedHold(m)
		if !end.IsZero() {
			if c := p.now().Add(p.carriedGrace(m, grace) + p.dcfg.IdleTimeout); c.After(until) {
				until = c
			}
			if at.IsZero() || m.HeldAt.Before(at) {
				at = m.HeldAt
			}
			if end.After(until) {
				until = end
			}
			carried++
			if until.After(carriedUntil) {
				carriedUntil = until
			}
		}
		// A file with held_until and no held_at (edited) carries no hold:
		// at would be zero.
		if len(m.Sources) > 0 || !end.IsZero() {
			p.eng.HoldAfterRestart(k, at, until)
			held++
		}
	}
	// Without a state file (lost, or damaged) while the store holds calls,
	// which sources were delivering at the stop, and when it was, are
	// unknown: every partition with a stored call holds at its last one
	// for restart_grace + idle_timeout, as a sender's backlog may come
	// after any outage. A new data directory (no call stored) holds
	// nothing.
	unknown := p.cfg.StateFile != "" && marks == nil && n > 0
	if unknown {
		for k, srcs := range p.eng.ActiveSources(p.now(), "") {
			for _, src := range srcs {
				if src.Name == recoverySource {
					p.eng.HoldAfterRestart(k, src.Clock, hold)
					held++
				}
			}
		}
	}
	if held > 0 {
		msg := "partitions whose sources were delivering at the stop hold their watermarks at what those had delivered, for their senders' backlogs: findings about later calls wait until then"
		args := []any{"partitions", held, "hold", grace + p.dcfg.IdleTimeout, "until", hold}
		switch {
		case unknown:
			msg = "no state file while the store holds calls: partitions with stored calls hold their watermarks at their last stored call, for senders' backlogs: findings about later calls wait until then"
			args = append(args, "downtime", "unknown", "why", "restart_grace + idle_timeout: without the state file (partitions.json) the downtime and the sources delivering at the stop are unknown")
		case down < 0:
			args = append(args, "downtime", "unknown", "why", "restart_grace + idle_timeout: the state file does not say when the last run stopped")
		case down <= p.cfg.RestartGrace:
			args = append(args, "downtime", down, "why", "restart_grace + idle_timeout: down for less than restart_grace")
		case grace < down && grace == p.cfg.RestartGrace:
			args = append(args, "downtime", down, "why", "restart_grace + idle_timeout: restart_grace_max is below restart_grace")
		case grace < down:
			args = append(args, "downtime", down, "why", "restart_grace_max + idle_timeout: down for longer than restart_grace_max")
		default:
			args = append(args, "downtime", down, "why", "downtime + idle_timeout: senders' reconnect backoff grows with the outage")
		}
		if carried > 0 {
			args = append(args, "carried", carried, "carried_until", carriedUntil,
				"carried_why", "the state file was saved during the hold of an earlier restart (a crash while senders' backlogs came): those partitions hold at its mark until the later end")
		}
		p.log.Info(msg,
			append(args, "restart_grace", p.cfg.RestartGrace, "restart_grace_max", p.cfg.RestartGraceMax, "idle_timeout", p.dcfg.IdleTimeout)...)
	}
	p.eng.Tick(p.now())
	p.countOpen()
	if n > 0 || skipped > 0 || seeded > 0 || skippedLate > 0 {
		p.log.Info("correlation state rebuilt from the store", "watermark", wm, "partitions", len(marks),
			"replayed_calls", n, "freed_calls_skipped", skipped, "freed_calls_seeded", seeded, "too_late_calls_skipped", skippedLate,
			"answers_aside_replayed", answers, "known_findings", len(known), "took", p.now().Sub(start).Round(time.Millisecond))
	}
	return nil
}

// LastDowntime returns the time the collector was down before this start:
// from the previous run's last save of its state file (at its clean stop,
// or up to stateRefresh before a crash) to this start. Both are zero when
// it is unknown: no state file, a new data directory, or a state file of a
// release that did not keep its saved time.
func (p *Pipeline) LastDowntime() (from, to time.Time) {
	return p.downFrom, p.downTo
}

// Downtimes returns the last DowntimesKept times the collector was down,
// oldest first, this start's included, as the state file keeps them
// across restarts. Empty without a state file, and after a start without
// one (deleted or damaged): the history begins again there.
func (p *Pipeline) Downtimes() []audit.Downtime {
	return slices.Clone(p.downtimes)
}

// carriedHold returns the end of the restart hold m says was in force
// when the last run saved the state file (zero when none), at most the
// longest hold a start gives from now (restart_grace_max, or
// restart_grace when larger, plus the idle timeout): a file saved with
// the wall clock ahead, or edited, holds no longer than that. An end
// already past still returns: the hold's mark stands for the backlog that
// had not come, and this start holds at it for its own time.
func (p *Pipeline) carriedHold(m mark) time.Time {
	if m.HeldUntil.IsZero() || m.HeldAt.IsZero() {
		return time.Time{}
	}
	limit := p.now().Add(max(p.cfg.RestartGrace, p.cfg.RestartGraceMax) + p.dcfg.IdleTimeout)
	if m.HeldUntil.After(limit) {
		return limit
	}
	return m.HeldUntil
}

// carriedGrace returns the grace of a partition whose restart hold the
// last run had in force when it saved the file (carriedHold): at least
// grace, this start's, and the grace of the outage its sources' senders
// saw, from the earliest of their last deliveries (SourceClock.Seen) to
// now. A sender that had not got through again when the last run died
// (its backoff, grown over the earlier outage, still running) has been
// failing since before that outage, not since the last save: its next
// try, and its oldest requests, come as late as that longer outage
// makes them. Counted from the last save alone, the hold of a start after
// a kill -9 during the earlier hold ended before them: a Collector whose
// senders never reconnected in the 40 s serve was up between the two
// came back 1m10s to 1m47s after the second start, past both holds' ends,
// 133 and 259 calls too late in two runs (found from outside, out25 O1).
func (p *Pipeline) carriedGrace(m mark, grace time.Duration) time.Duration {
	var since time.Time
	for _, src := range m.Sources {
		if !src.Seen.IsZero() && (since.IsZero() || src.Seen.Before(since)) {
			since = src.Seen
		}
	}
	if since.IsZero() {
		return grace
	}
	g, _ := restartGrace(p.cfg, since, p.now())
	return max(grace, g)
}

// restartGrace returns how long after a restart at wall time now the
// sources that held their partitions at the stop hold them without
// delivering (the idle timeout comes on top): the time the collector was
// down, since saved (its state file's last save), between
// cfg.RestartGrace and cfg.RestartGraceMax, and RestartGrace when saved is
// unknown (down is then negative). A sender's reconnect backoff grows with
// the outage: gRPC's to about 0.7 times the time it has been failing, up
// to 2 m ± 20 %, and an OpenTelemetry Collector's retry adds up to 45 s.
// A quick restart keeps the short grace, so its findings wait no longer.
func restartGrace(cfg Config, saved, now time.Time) (grace, down time.Duration) {
	if saved.IsZero() {
		return cfg.RestartGrace, -1
	}
	down = max(now.Sub(saved), 0).Round(time.Second)
	return max(cfg.RestartGrace, min(down, cfg.RestartGraceMax)), down
}

// storedWrite reports whether the store holds the write w under call c,
// another observation of its exchange, dated at c's time (a write's time is
// its call's). Engine goroutine, after a restart, for the rare exchange
// observed twice late; a store that cannot answer is taken as holding
// nothing (the write is then stored under the replay's call as well).
func (p *Pipeline) storedWrite(w *audit.Write, c *audit.Call) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A millisecond either side: a store may keep times to the millisecond.
	q := audit.WriteQuery{Server: w.Server, Tenant: w.Tenant, Since: c.Time.Add(-time.Millisecond),
		Until: c.Time.Add(time.Millisecond), Limit: 1000}
	for {
		pg, err := p.store.Writes(ctx, q)
		if err != nil {
			p.log.Warn("cannot tell whether a write was stored under another observation of its call; storing it under this one", "call_id", w.CallID, "err", err)
			return false
		}
		for _, s := range pg.Writes {
			if s.CallID == c.ID && s.Seq == w.Seq && s.Tenant == w.Tenant {
				return true
			}
		}
		if pg.NextCursor == "" {
			return false
		}
		q.Cursor = pg.NextCursor
	}
}

// pendingReadBudget bounds the read of the writes stored pending at a
// restart (pendingWrites). Past it, every write a replayed call settles in
// the marks' range has its state stored again, and metrics count those the
// live run settled twice: a restart must not wait for a slow store. Reading
// 100,000 pending writes took 1.4 to 2.9 s on SQLite and 22 to 35 s on
// ClickHouse 18.16 (docs/benchmarks.md, narrow14).
const pendingReadBudget = 2 * time.Second

// pendingWrites calls each for every write the store holds pending whose
// Time is in [since, until), a page at a time, within pendingReadBudget.
// Engine goroutine, after a restart, once (gate.storedPending); it logs
// what it cost.
func (p *Pipeline) pendingWrites(since, until time.Time, each func(*audit.Write)) error {
	ctx, cancel := context.WithTimeout(context.Background(), pendingReadBudget)
	defer cancel()
	start, n := time.Now(), 0
	q := audit.WriteQuery{State: audit.StatePending, Since: since, Until: until, Limit: 1000}
	for {
		pg, err := p.store.Writes(ctx, q)
		if err != nil {
			p.log.Warn("cannot read the writes stored pending; the states replayed calls settle them to are stored again, and metrics may count some twice",
				"read", n, "budget", pendingReadBudget, "took", time.Since(start).Round(time.Millisecond), "err", err)
			return err
		}
		for i := range pg.Writes {
			each(&pg.Writes[i])
		}
		n += len(pg.Writes)
		if pg.NextCursor == "" {
			break
		}
		q.Cursor = pg.NextCursor
	}
	p.log.Info("read the writes stored pending that replayed calls may settle", "writes", n, "since", since, "until", until, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// queued is a batch stored and waiting for the engine goroutine.
type queued struct {
	audit.Batch
	// refused are the indexes, in order, of the records the store did not
	// store because a call of their id is stored with another response
	// (audit.ResponseComparer): the engine counts them as id collisions
	// and does not judge them.
	refused []int
	// held are the indexes, in order, of the records whose call the store
	// held before this request stored them (stored before, or earlier in
	// the request): a copy sent again. allHeld: the store cannot tell
	// (it does not compare), so any record may be one.
	held    []int
	allHeld bool
	// resent are the indexes, in order, of the records that are calls of
	// a partition freed as idle sent again, judged before the freeing
	// (Pipeline.resent): the engine does not take them.
	resent []int
	// answered are the indexes, in order, of the held records the store
	// kept aside as the answer of a stored unanswered call (or may have:
	// audit.AnswerReporter): the engine may judge one as a call of its
	// own, and the commit must then name it (gate.answerHeld).
	answered []int
}

// append stores recs and returns how many were stored for the first time
// and, when the store compares responses, the indexes of the calls it
// held already and of those it skipped for another response under their
// stored id; ok is false when the store cannot tell which it held.
//
// answered are the indexes of the held calls that may complete the stored
// call with an answer; answers is false when the store does not tell them
// (audit.AnswerReporter), and any held call may then.
func (p *Pipeline) append(ctx context.Context, recs []audit.Record) (n int, held, differ, answered []int, ok, answers bool, err error) {
	if a, ok := p.store.(audit.AnswerReporter); ok {
		n, held, differ, answered, err := a.AppendCallsAnswered(ctx, recs)
		return n, held, differ, answered, true, true, err
	}
	if c, ok := p.store.(audit.ResponseComparer); ok {
		n, held, differ, err := c.AppendCallsCompared(ctx, recs)
		return n, held, differ, nil, true, false, err
	}
	n, err = p.store.AppendCalls(ctx, recs)
	return n, nil, nil, nil, false, false, err
}

// at reports whether the sorted indexes *idx hold i, dropping those
// before i and i itself: a request's lists of record indexes (held,
// differ, answered, resent, refused) are walked with its records in order.
func at(idx *[]int, i int) bool {
	for len(*idx) > 0 && (*idx)[0] < i {
		*idx = (*idx)[1:]
	}
	if len(*idx) > 0 && (*idx)[0] == i {
		*idx = (*idx)[1:]
		return true
	}
	return false
}

// split moves the indexes of idx below n to the end of dst, and shifts the
// rest down by n: idx is of the records of a request, dst of its first
// batch of n records.
func split(dst, idx []int, n int) ([]int, []int) {
	for len(idx) > 0 && idx[0] < n {
		dst = append(dst, idx[0])
		idx = idx[1:]
	}
	for i := range idx {
		idx[i] -= n
	}
	return dst, idx
}

// Ingest stores the records of one request durably, in one commit, and
// queues them for the engine. When it returns nil they are committed: the
// caller may acknowledge them. It returns how many were stored for the
// first time. Errors wrapping audit.ErrOverloaded or audit.ErrUnavailable
// mean nothing was stored and the sender should retry later.
func (p *Pipeline) Ingest(ctx context.Context, batches ...audit.Batch) (int, error) {
	var n int64
	for _, b := range batches {
		n += int64(len(b.Records))
	}
	if n == 0 {
		return 0, nil
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		return 0, ErrStopped
	}
	// A tenant over its share is told so first: it is the one to slow
	// down, whatever the others hold.
	perTenant := countTenants(batches...)
	// The source a partition's watermark waits for is taken past the
	// limits on open calls: only its calls let the waiting ones go.
	holder := p.holdsBack(batches)
	if err := p.reserveShare(perTenant, holder); err != nil {
		p.refused(batches)
		return 0, err
	}
	if !holder && (p.open.Load()+p.inflight.Load()+n > int64(p.cfg.MaxOpenCalls) || nearMemoryLimit()) {
		p.unqueue(perTenant)
		p.refused(batches)
		return 0, ErrOpenState
	}
	if p.inflight.Add(n) > int64(p.cfg.QueueCalls) {
		p.inflight.Add(-n)
		p.unqueue(perTenant)
		p.refused(batches)
		return 0, ErrQueueFull
	}
	recs := make([]audit.Record, 0, n)
	for _, b := range batches {
		for _, r := range b.Records {
			recs = append(recs, *r)
		}
	}
	// A partition freed as idle that the calls bring back leaves the state
	// file before they are stored (comeback): a call stored and then lost
	// to a crash before its acknowledgement is replayed at the next start,
	// and its output must not be taken then as committed.
	arrived, back, floor, err := p.comebackFreed(batches)
	if err != nil {
		p.inflight.Add(-n)
		p.unqueue(perTenant)
		p.refused(batches)
		p.warnState(err)
		return 0, fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
	}
	defer arrived() // after lowerFloor below; on a panic too
	stored, held, differ, answered, knows, answers, err := p.append(ctx, recs)
	if err != nil {
		p.unsure(batches)
		p.inflight.Add(-n)
		p.unqueue(perTenant)
		p.refused(batches)
		return 0, err
	}
	var resent []int
	if len(back) > 0 && answers && len(held) > 0 {
		resent = p.resent(recs, back, floor, held, differ, answered)
	}
	// Before the calls are acknowledged, the state file's floor reaches
	// back to them: a crash before they are judged replays them. When the
	// file cannot be written the calls are still acknowledged (they are
	// stored, and judged unless the process dies before that): refusing
	// every backlog would be an outage for want of a file.
	for _, b := range batches {
		if err := p.lowerFloor(earliest(b)); err != nil {
			p.warnState(err)
		}
	}
	// The engine keeps what correlation needs, not the payloads the store
	// has now.
	now := p.now()
	for _, b := range batches {
		for i, r := range b.Records {
			r.Call.Received = now
			b.Records[i] = r.Lean()
		}
	}
	for _, b := range batches {
		q := queued{Batch: b, allHeld: !knows}
		q.refused, differ = split(q.refused, differ, len(b.Records))
		q.held, held = split(q.held, held, len(b.Records))
		q.resent, resent = split(q.resent, resent, len(b.Records))
		q.answered, answered = split(q.answered, answered, len(b.Records))
		select {
		case p.queue <- q:
		case <-p.done:
			// Stored, but the engine is gone: the calls are replayed from
			// the store at the next start.
			p.inflight.Add(-int64(len(b.Records)))
			p.unqueue(countTenants(b))
			p.dequeued(earliest(b), false)
		}
	}
	return stored, nil
}

// nearMemoryLimit reports whether the heap is within 10 % of the memory
// limit (GOMEMLIMIT, or the configured one): new calls are refused before
// the garbage collector has to fight for the last of it. A heap that is
// there with garbage has a collection started (memlimit.Over).
func nearMemoryLimit() bool { return memlimit.Over(0.9) }

// Close stops the engine goroutine after committing its output. Calls
// still waiting for their watermark are in the store and are replayed at
// the next start.
func (p *Pipeline) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// StateSaved returns when the state file (Config.StateFile) was last
// written whole, the stop's writing included; zero when it never was.
func (p *Pipeline) StateSaved() time.Time {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	return p.marksSaved
}

// Status returns where every partition and source stands now, and how
// many acknowledged calls are not yet handed to the engine. It asks the
// engine goroutine; once that has stopped, it returns the last status.
func (p *Pipeline) Status() ([]detect.PartitionStatus, int64) {
	parts, queued, _ := p.Report()
	return parts, queued
}

// statusReply is the engine goroutine's answer to a status question.
type statusReply struct {
	parts    []detect.PartitionStatus
	unstored int
}

// Report is Status, and how many findings, write states and calls counted
// too late (their names, audit.Results.TooLate) are judged but not stored:
// the engine goroutine stores what it has judged before it answers, so
// that what a status calls judged can be read from the store at once; they
// are left only when the store refused them (retried at the next commit).
func (p *Pipeline) Report() (parts []detect.PartitionStatus, queued int64, unstored int) {
	return p.report(nil)
}

// StatusWithin is Status for a reader that must not wait long (a metrics
// scrape): when the engine goroutine does not answer within d, busy with a
// long step (a new partition's backlog judged at once once its join wait
// ends took 9 s at 17k calls/s), it returns the last status the engine
// took instead, as of its last step before.
func (p *Pipeline) StatusWithin(d time.Duration) ([]detect.PartitionStatus, int64) {
	t := time.NewTimer(d)
	defer t.Stop()
	parts, queued, _ := p.report(t.C)
	return parts, queued
}

// report asks the engine goroutine for its status, or gives up when
// giveUp fires (never when nil) or the engine has stopped, and returns
// the last status it took then.
func (p *Pipeline) report(giveUp <-chan time.Time) (parts []detect.PartitionStatus, queued int64, unstored int) {
	// Calls acknowledged before now are queued or taken: count the queue
	// before asking, so that a call taken meanwhile shows in the status.
	queued = p.inflight.Load()
	reply := make(chan statusReply, 1)
	select {
	case p.statusReq <- reply:
		select {
		case st := <-reply:
			return st.parts, queued, st.unstored
		case <-p.done:
		case <-giveUp:
		}
	case <-p.done:
	case <-giveUp:
	}
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	return aged(p.status, p.now().Sub(p.statusAt)), p.inflight.Load(), 0
}

// aged returns the status st taken by ago earlier, its lags as of now:
// while the engine is busy its watermarks stand still and the wall clock
// goes on, so a lag alert still sees them fall behind.
func aged(st []detect.PartitionStatus, ago time.Duration) []detect.PartitionStatus {
	if ago <= 0 {
		return st
	}
	out := make([]detect.PartitionStatus, len(st))
	for i, ps := range st {
		if !ps.Watermark.IsZero() {
			ps.Lag += ago
		}
		ps.Sources = slices.Clone(ps.Sources)
		for j := range ps.Sources {
			if !ps.Sources[j].LastEvent.IsZero() {
				ps.Sources[j].Lag += ago
			}
		}
		out[i] = ps
	}
	return out
}

// Freed returns, as of the last status taken, the counts of the partitions
// freed as idle since the start, per key (detect.Engine.FreedStatus): what
// their calls too late were, which the status of the partitions alone no
// longer tells once they are freed.
func (p *Pipeline) Freed() []detect.PartitionStatus {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	return p.freedStatus
}

// lastStatus returns the last status taken; the engine goroutine's view.
func (p *Pipeline) lastStatus() []detect.PartitionStatus {
	p.statusMu.Lock()
	defer p.statusMu.Unlock()
	return p.status
}

func (p *Pipeline) updateStatus() {
	now := p.now()
	st := p.eng.Status(now)
	freed := p.eng.FreedStatus()
	p.statusMu.Lock()
	prev := p.status
	p.status, p.statusAt, p.freedStatus = st, now, freed
	p.statusMu.Unlock()
	p.logLate(prev, st)
	p.logOverflow(prev, st)
}

// logOverflow logs, once per status update and partition, the calls taken
// under the partition's overflow source since the last update: its
// sources were detect.max_sources, none quiet, when new ones came. A few
// lines a minute at most; mcpaudit_pipeline_source_overflow_calls_total
// counts every call.
func (p *Pipeline) logOverflow(prev, now []detect.PartitionStatus) {
	var before map[detect.PartitionKey]int64
	for _, s := range now {
		if s.OverflowCalls == 0 {
			continue
		}
		if before == nil {
			before = make(map[detect.PartitionKey]int64, len(prev))
			for _, b := range prev {
				before[b.PartitionKey] = b.OverflowCalls
			}
		}
		if n := s.OverflowCalls - before[s.PartitionKey]; n > 0 {
			p.rlog.Warn("source_overflow", "a partition holds detect.max_sources sources, none quiet: calls of new sources are judged under its overflow source, whose clock follows the latest of them (a sender naming a new source per request, or more pods than the bound)",
				"tenant", s.Tenant, "server", s.Server, "calls", n, "max_sources", p.dcfg.MaxSources, "sources_displaced", s.SourcesDisplaced)
		}
	}
}

// logLate logs, once per status update and partition, the calls that came
// late, too late or dated ahead since the last update, with the sources
// that sent them; each of the three a few times a minute at most.
func (p *Pipeline) logLate(prev, now []detect.PartitionStatus) {
	before := make(map[detect.PartitionKey]detect.PartitionStatus, len(prev))
	for _, s := range prev {
		before[s.PartitionKey] = s
	}
	for _, s := range now {
		b := before[s.PartitionKey]
		late, tooLate, ahead := s.Late-b.Late, s.TooLate-b.TooLate, s.Ahead-b.Ahead
		if late <= 0 && tooLate <= 0 && ahead <= 0 {
			continue
		}
		// Each line names the sources of its own kind: one list for all
		// three named a slow pod on the clock-ahead line and the pod ahead
		// on the late line (out24's D3).
		var lateFrom, tooLateFrom, aheadFrom, senders []string
		var tl detect.Span // the event times the too-late sources' calls not judged span
		old := map[string]detect.SourceStatus{}
		for _, src := range b.Sources {
			old[src.Name] = src
		}
		for _, src := range s.Sources {
			o := old[src.Name]
			if src.Behind > 0 && o.Behind == 0 {
				// Once per source and run: such a source is not current
				// until it delivers a call within max_clock_lag, and
				// then never counts behind again.
				p.rlog.Warn("clock_behind_calls", "a source's calls are dated further behind their delivery than detect.max_clock_lag, and it never delivered one within it: its clock is slow (or it sends a backlog that old under a name new to the partition); its calls are counted too late, not judged (mcpaudit_pipeline_clock_behind_calls_total counts them; logged once per source)",
					"tenant", s.Tenant, "server", s.Server, "source", src.Name, "lag", src.Lag.Round(time.Second), "calls", src.Behind, "max_clock_lag", p.dcfg.MaxClockLag)
			}
			if src.Late > o.Late {
				lateFrom = append(lateFrom, src.Name)
			}
			if src.Ahead > o.Ahead {
				aheadFrom = append(aheadFrom, src.Name)
			}
			if src.TooLate > o.TooLate {
				tooLateFrom = append(tooLateFrom, src.Name)
				tl.Merge(src.TooLateSpan())
				// The overflow source is no sender: its calls are stored
				// under their senders' names, the latest few of which it
				// keeps.
				senders = append(senders, src.TooLateSenders...)
			}
		}
		args := func(from []string) []any {
			return []any{"tenant", s.Tenant, "server", s.Server, "watermark", s.Watermark, "sources", from}
		}
		// A source with a wrong clock, or one far behind, makes these at
		// every update while it sends: a few lines a minute of each, the
		// rest counted (the metrics count every call).
		if late > 0 {
			p.rlog.Info("late_calls", "late calls judged against open state", append(args(lateFrom), "calls", late)...)
		}
		if tooLate > 0 {
			// The span is every call of those sources not judged since the
			// start (the status has it too): the findings that may be
			// missing are about calls of that time.
			w := append(args(tooLateFrom), "calls", tooLate, "too_late_from", tl.From, "too_late_to", tl.To)
			if behind := s.Behind - b.Behind; behind > 0 {
				w = append(w, "clock_behind", behind)
			}
			if len(senders) > 0 {
				w = append(w, "overflow_senders", senders)
			}
			p.rlog.Warn("too_late_calls", "calls later than detect.allowed_lateness behind their partition: stored, not judged; findings about calls of the sources' too-late span may be missing", w...)
		}
		if ahead > 0 {
			p.rlog.Warn("clock_ahead_calls", "calls dated ahead of the collector's clock by more than detect.max_clock_skew: judged on arrival", append(args(aheadFrom), "calls", ahead)...)
		}
	}
}

// collision logs an id collision: another exchange under the span ids of
// a call taken, dropped unjudged (stored all the same). A broken exporter
// or a replay tool makes one per span: a few lines a minute, the rest
// counted (mcpaudit_pipeline_id_collisions_total). A call replayed after
// a restart whose output was committed before was logged then. Engine
// goroutine.
func (p *Pipeline) collision(c detect.Collision) {
	d := c.Dropped
	if d.Received.IsZero() && p.gate.committed(d.Tenant, d.Server, d.Time) || p.gate.silent(d) {
		return
	}
	kept := c.Kept
	if kept == "" {
		kept = "(judged earlier, no longer held)"
	}
	if slices.Contains(c.Differs, detect.DiffResponse) {
		// One call id: the store took one of the two (the first it was
		// given) and skipped the other.
		p.rlog.Warn("id_collision", "two observations of one call id (the same request at the same millisecond) carry different responses (a broken exporter or poster, or a replay tool rewriting responses): one is stored and judged; the other response, of the observation from source, is neither stored nor judged",
			"tenant", c.Tenant, "server", c.Server, "source", c.DroppedSource, "call_id", d.ID, "time", d.Time,
			"kept_call_id", kept, "kept_source", c.KeptSource, "trace_id", c.TraceID, "span_id", c.SpanID, "differs", c.Differs)
		return
	}
	p.rlog.Warn("id_collision", "two different calls share a trace and span id (a broken exporter, or a replay tool rewriting ids): the call of call_id is stored but not judged",
		"tenant", c.Tenant, "server", c.Server, "source", c.DroppedSource, "call_id", d.ID, "time", d.Time,
		"kept_call_id", kept, "kept_source", c.KeptSource, "trace_id", c.TraceID, "span_id", c.SpanID, "differs", c.Differs)
}

// run is the engine goroutine.
func (p *Pipeline) run(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(p.cfg.CommitEvery)
	defer tick.Stop()
	ticks := tick.C
	if p.cfg.ticks != nil {
		tick.Stop()
		ticks = p.cfg.ticks
	}
	lastStatus, lastExpiry := time.Time{}, p.now()
	for {
		select {
		case b := <-p.queue:
			p.take(b)
			p.drain()
			if p.gate.pending() > 5000 {
				p.commit(ctx)
			}
		case t := <-p.touches:
			p.eng.Touch(t.tenant, t.source, t.at)
		case reply := <-p.statusReq:
			// Everything acknowledged before the question is judged as far
			// as it can be first.
			p.drain()
			now := p.now()
			p.applyTouches()
			p.eng.Tick(now)
			p.gate.forget()
			// ... and stored: a caller that waits for the status to say
			// judged and then reads the findings finds them (without
			// this it could ask before the next commit, CommitEvery).
			if p.gate.pending() > 0 && ctx.Err() == nil {
				p.commit(ctx)
			}
			p.updateStatus()
			reply <- statusReply{parts: p.lastStatus(), unstored: p.gate.pending()}
		case <-ticks:
			if ctx.Err() != nil {
				continue // stopping: the shutdown branch commits
			}
			now := p.now()
			p.applyTouches()
			p.eng.Tick(now)
			p.countOpen()
			p.gate.forget()
			if p.commit(ctx) == nil && now.Sub(lastExpiry) >= expireEvery {
				p.expireIdle(now)
				lastExpiry = now
			}
			if now.Sub(lastStatus) >= time.Second {
				p.updateStatus()
				lastStatus = now
			}
		case <-ctx.Done():
			p.drain()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := p.commit(cctx); err != nil {
				p.log.Error("cannot commit the engine's output at shutdown; it will be rebuilt from stored calls at the next start", "err", err)
			} else {
				// Under floorMu: a request past the stopped check may still
				// write the file (lowerFloor, comeback).
				// A zero marksSaved has the file written even when nothing
				// in it changed (no partition): its saved time is then the
				// stop, where the next start counts the downtime from,
				// not the last refresh up to stateRefresh before.
				// From here on every write of the file says the run
				// stopped clean: a crash is a run that never gets here.
				p.floorMu.Lock()
				p.savedMarks, p.marksSaved, p.cleanStop = nil, time.Time{}, true
				p.floorMu.Unlock()
				p.saveMarks(marksOf(p.eng, p.now()), true)
			}
			p.floorMu.Lock()
			p.counts.close()
			p.floorMu.Unlock()
			cancel()
			p.updateStatus()
			return
		}
	}
}

// touch is a source whose delivery was refused at a wall time.
type touch struct {
	tenant, source string
	at             time.Time
}

// refused tells the engine that the batches' sources tried to deliver now:
// a source the collector refuses (back-pressure, a store outage) is not
// quiet, and must not stop holding its partitions back, or its calls,
// retried after the refusal, would come late and windows would close
// without them. Best effort: dropped when the engine is that far behind.
func (p *Pipeline) refused(batches []audit.Batch) {
	now := p.now()
	for _, b := range batches {
		if len(b.Records) == 0 {
			continue
		}
		select {
		case p.touches <- touch{tenant: b.Records[0].Call.Tenant, source: b.Source, at: now}:
		default:
		}
	}
}

// applyTouches hands the engine every refusal already reported, without
// waiting. The engine's clock is read before, so that a refusal made
// before that time is applied before the engine judges idleness at it:
// otherwise a tick taken first would find the refused source quiet.
func (p *Pipeline) applyTouches() {
	for {
		select {
		case t := <-p.touches:
			p.eng.Touch(t.tenant, t.source, t.at)
		default:
			return
		}
	}
}

// drain takes every batch already queued, without waiting.
func (p *Pipeline) drain() {
	for {
		select {
		case b := <-p.queue:
			p.take(b)
		default:
			return
		}
	}
}

func (p *Pipeline) take(q queued) {
	b, refused, held, resent, answered := q.Batch, q.refused, q.held, q.resent, q.answered
	now := p.now()
	skipped := 0
	// Adding calls judges idleness at now too: the refusals reported
	// before it count first, whichever case of run's select came first.
	p.applyTouches()
	for i, r := range b.Records {
		stored := at(&held, i)
		p.gate.held = stored || q.allHeld
		if at(&resent, i) {
			// Judged and committed before its partition was freed: the
			// replay at start passes over it too.
			skipped++
			continue
		}
		if at(&refused, i) {
			p.eng.AddRefused(b.Source, r, now)
			continue
		}
		if at(&answered, i) {
			p.gate.answerHeld(r.Call)
		}
		if stored {
			// Held by the store: a copy of a call handed to the engine
			// before, a duplicate when too late, not a call never judged
			// (docs/detection.md, "Late calls"). A store that cannot tell
			// (allHeld) leaves it counted too late.
			p.eng.AddHeld(b.Source, r, now)
			continue
		}
		p.eng.Add(b.Source, r, now)
	}
	p.gate.held = false
	if skipped > 0 {
		p.rlog.Info("resent_freed", "calls sent again of a partition freed as idle, judged and committed before it was freed: not judged again",
			"calls", skipped, "source", b.Source)
	}
	p.dequeued(earliest(b), false)
	p.countOpen()
	p.unqueue(countTenants(b))
	p.inflight.Add(-int64(len(b.Records)))
}

// commit stores the output gathered since the last commit with the
// watermarks it was produced at.
func (p *Pipeline) commit(ctx context.Context) error {
	marks := p.eng.Watermarks()
	r := p.gate.take()
	for _, t := range marks {
		if r.Watermark.IsZero() || t.Before(r.Watermark) {
			r.Watermark = t
		}
	}
	if len(r.Writes) == 0 && len(r.Findings) == 0 && len(r.TooLate) == 0 && len(r.Answered) == 0 && !r.Watermark.After(p.gate.committedWM) {
		p.withdraw(ctx)
		p.saveMarks(marksOf(p.eng, p.now()), ctx.Err() != nil)
		return nil
	}
	p.keepBeforeCommit(r)
	if err := p.store.Commit(ctx, r); err != nil {
		// Keep the output for the next attempt.
		p.gate.putBack(r)
		if ctx.Err() == nil {
			p.rlog.Warn("commit_retry", "cannot commit detector output; retrying", "err", err)
		}
		return err
	}
	if r.Watermark.After(p.gate.committedWM) {
		p.gate.committedWM = r.Watermark
	}
	p.gate.committedNow(p.now())
	p.gate.tellMoves()
	p.withdraw(ctx)
	p.saveMarks(marksOf(p.eng, p.now()), false)
	return nil
}

// withdraw marks withdrawn, in the store's finding lifecycle, the stored
// findings the detector took back (gate.WithdrawFinding): after the commit
// that stored the output judged with them, whatever state a person gave
// it (audit.CheckTransition). One withdrawn already, or that the store
// does not hold, is left as it is; what the
// store cannot take now is tried again at the next commit. A store
// without the lifecycle (audit.Investigator) keeps them open.
func (p *Pipeline) withdraw(ctx context.Context) {
	if len(p.gate.withdrawn) == 0 {
		return
	}
	inv, ok := p.store.(audit.Investigator)
	if !ok {
		for _, c := range p.gate.withdrawn {
			p.gate.tellLive(c.FindingID)
			p.gate.tellRestartWrite(c.FindingID, false, false)
		}
		p.gate.withdrawn, p.gate.atRestart, p.gate.atRestartTold, p.gate.carried = nil, nil, nil, nil
		p.keepUnstored(nil)
		return
	}
	kept := p.gate.withdrawn[:0]
	restarted, carried, waited := 0, 0, 0
	for _, c := range p.gate.withdrawn {
		at := c.Time
		c.Time = p.now()
		_, err := inv.ChangeFinding(ctx, c)
		switch {
		case err == nil, errors.Is(err, audit.ErrStateConflict), errors.Is(err, audit.ErrNotFound):
			p.gate.tellRestartWrite(c.FindingID, err == nil, errors.Is(err, audit.ErrStateConflict))
			if err == nil && p.gate.atRestart[c.FindingID] != nil {
				restarted++
				p.tellAtRestart(c.FindingID, at)
			}
			if err == nil && p.gate.carried[c.FindingID] {
				carried++
			}
			p.gate.tellLive(c.FindingID)
		case errors.Is(err, audit.ErrUnavailable) || ctx.Err() != nil:
			// Counted now, once: kept in the state file, a later restart
			// makes it as the last run's, counted (carried).
			if p.gate.atRestart[c.FindingID] != nil {
				p.tellAtRestart(c.FindingID, at)
			}
			p.gate.tellRestartWrite(c.FindingID, true, false)
			p.gate.tellLive(c.FindingID)
			if errors.Is(err, audit.ErrUnavailable) && !p.waitLogged[c.FindingID] {
				// Once per withdrawal: a store that never takes it would
				// otherwise be retried at every commit unseen.
				if p.waitLogged == nil {
					p.waitLogged = map[string]bool{}
				}
				p.waitLogged[c.FindingID] = true
				p.log.Warn("the store refused the withdrawal of a stored unverified_write finding; retried at every commit and kept in the state file, "+
					"the store shows the finding open until it takes it (mcpaudit_withdrawals_waiting; docs/runbooks.md#mcpauditwithdrawalswaiting)",
					"finding", c.FindingID, "tenant", c.Tenant, "err", err)
			}
			c.Time = at
			kept = append(kept, c)
			continue
		default:
			// Given up: the finding stands in the store, and in the
			// metrics.
			p.rlog.Warn("withdraw_failed", "cannot mark a finding withdrawn", "finding", c.FindingID, "err", err)
			delete(p.gate.toTell, c.FindingID)
			p.gate.tellRestartWrite(c.FindingID, false, false)
		}
		if p.waitLogged[c.FindingID] {
			waited++
			delete(p.waitLogged, c.FindingID)
		}
		delete(p.gate.atRestart, c.FindingID)
		delete(p.gate.atRestartTold, c.FindingID)
		delete(p.gate.carried, c.FindingID)
	}
	clear(p.gate.withdrawn[len(kept):])
	p.gate.withdrawn = kept
	p.keepUnstored(kept)
	if restarted > 0 {
		p.log.Info("stored unverified_write findings withdrawn at the restart: the calls stored, judged again in time order, settle their writes; "+
			"the withdrawal made when a call judged late settled each was lost when the last run stopped (docs/detection.md, Late calls)",
			"findings", restarted)
	}
	if carried > 0 {
		p.log.Info("stored unverified_write findings withdrawn at the restart that the last run could not store (the store unavailable); "+
			"the state file kept them (docs/detection.md, Late calls)", "findings", carried)
	}
	if waited > 0 {
		p.log.Info("withdrawals the store had refused are stored, or found withdrawn or gone", "withdrawals", waited, "waiting", len(kept))
	}
}

// keepBeforeCommit has the state file keep the withdrawals queued for
// after the commit of r (gate.withdrawn) before that commit is made, when
// it puts answers in their calls' places (r.Answered): the withdrawals
// are made after the commit (withdraw), and a process that died between
// the two left the store with the call answered and its unverified_write
// open, which a restart's replay, reading the call answered, judges
// durable at once and never withdraws (found by the lead at integration,
// fx21). Kept in the file, the next start makes them as the last run's
// (markFile.Withdrawals: the gate's carried, counted by this run when it
// told them); one the store took already is refused and left as it is.
// A withdrawal queued at this run's restart that the sinks were not told
// yet is left out: the run that makes it counts it, and a restart before
// that makes it again from its replay. A store that keeps no answers
// aside (ClickHouse) passes over r.Answered: the withdrawal kept is made
// all the same, as the live run made it.
func (p *Pipeline) keepBeforeCommit(r audit.Results) {
	if p.cfg.StateFile == "" || len(r.Answered) == 0 || len(p.gate.withdrawn) == 0 {
		return
	}
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	keep := slices.Clone(p.unstoredWithdrawals)
	for _, c := range p.gate.withdrawn {
		if p.gate.atRestart[c.FindingID] != nil && !p.gate.atRestartTold[c.FindingID] {
			continue
		}
		if !slices.ContainsFunc(keep, func(k audit.FindingChange) bool { return k.FindingID == c.FindingID && k.Tenant == c.Tenant }) {
			keep = append(keep, c)
		}
	}
	if len(keep) == len(p.unstoredWithdrawals) {
		return // the file keeps them already
	}
	p.unstoredWithdrawals = keep
	// The marks the file holds, not the engine's: those cover calls whose
	// output this commit stores.
	now := p.now()
	if err := writeMarks(p.cfg.StateFile, p.savedMarks, p.freed, p.floor, now, p.runState()); err != nil {
		p.warnStateLocked(err)
		if !renamed(err) {
			p.withdrawalsChanged = true
			return
		}
	}
	p.freedWritten()
	p.marksSaved, p.freedChanged, p.withdrawalsChanged = now, false, false
	// Kept in the file, a withdrawal is the last run's to a restart, which
	// takes it as counted (carried): count it now, as a refused one is
	// (tellLive). Left to the first attempt to store it, one whose commit
	// a crash prevented was counted by neither run.
	for _, c := range keep {
		p.gate.tellLive(c.FindingID)
	}
}

// tellAtRestart tells the sinks of the withdrawal of id the restart made
// (gate.atRestart) once, settled at at.
func (p *Pipeline) tellAtRestart(id string, at time.Time) {
	if p.gate.atRestartTold[id] {
		return
	}
	if p.gate.atRestartTold == nil {
		p.gate.atRestartTold = map[string]bool{}
	}
	p.gate.atRestartTold[id] = true
	p.gate.toldAtRestart(p.gate.atRestart[id], at)
}

// WithdrawalsWaiting counts the withdrawals the store refused as
// unavailable, retried at every commit and kept in the state file
// meanwhile (markFile.Withdrawals), of tenant (empty: every tenant): the
// store shows their findings open until it takes them.
func (p *Pipeline) WithdrawalsWaiting(tenant string) int {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	if tenant == "" {
		return len(p.unstoredWithdrawals)
	}
	n := 0
	for _, c := range p.unstoredWithdrawals {
		if c.Tenant == tenant {
			n++
		}
	}
	return n
}

// keepUnstored has the state file keep the withdrawals the store could
// not take (markFile.Withdrawals), from its next write on: the marks it
// saves may cover the calls that settled their writes, and a restart
// after a crash would then not make them again (review rev19w, D2).
func (p *Pipeline) keepUnstored(kept []audit.FindingChange) {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	if slices.EqualFunc(kept, p.unstoredWithdrawals, func(a, b audit.FindingChange) bool { return a.FindingID == b.FindingID && a.Tenant == b.Tenant }) {
		return
	}
	p.unstoredWithdrawals = slices.Clone(kept)
	p.withdrawalsChanged = true
}
