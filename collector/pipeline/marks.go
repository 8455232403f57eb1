package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// mark is what the state file keeps of one partition.
type mark struct {
	// Watermark is the event time up to which every call was judged and
	// its output committed (zero while nothing was).
	Watermark time.Time `json:"watermark"`
	// Waiting is the event time of the earliest call acknowledged and
	// waiting to be judged (zero when none): the replay at start must
	// reach back to it.
	Waiting time.Time `json:"waiting"`
	// Sources are the sources that still held the partition back (not
	// idle), with their clocks and last deliveries: restored at start
	// before the replay, so that the partition waits for a lagging
	// exporter as it did. A source's last delivery is not compared by
	// equal: the file keeps the one of its last write.
	Sources []detect.SourceClock `json:"sources,omitempty"`
	// Quiet are the sources quiet at the stop that still held the
	// partition at the lag they showed while they delivered (a clock
	// minutes slow: detect.Engine.QuietSources), with that lag and how
	// much longer they hold: restored at start, so that such a pod, quiet
	// through a restart, is not too late when it comes back. A source's
	// hold is not compared by equal: it shrinks each second.
	Quiet []detect.SourceClock `json:"quiet,omitempty"`
	// Deferred is the end of the earliest verification window still held
	// open for a source behind it (zero when none): the watermark passed
	// it, but its output was not made, so not committed. The replay at
	// start reaches back to it, and output of windows ending from it on
	// is not taken as committed.
	Deferred time.Time `json:"deferred,omitzero"`
	// At is the wall time the mark was taken. A partition whose sources
	// had all gone quiet moved on with the wall clock from its mark; after
	// a restart it goes on from there as if the collector had stayed up,
	// not from its last stored call at the wall clock's pace (which would
	// keep it behind by the time since that call, and close the windows
	// open at the stop that much late). Not compared by equal: a quiet
	// partition's watermark moves, and its mark is rewritten, each second.
	At time.Time `json:"at,omitzero"`
	// HeldUntil and HeldAt are the restart hold in force when the file
	// was saved (detect.Engine.Holds; zero when none): until wall time
	// HeldUntil the watermark does not pass HeldAt, what the sources had
	// delivered before the outage that began the hold. A start after a
	// crash during the hold keeps it: until the later of HeldUntil and
	// its own hold's end, at HeldAt or earlier. Without them the start
	// held the partition at its sources' saved clocks, which the sender's
	// backlog replayed out of order had taken minutes past HeldAt, and
	// for its own short downtime only: the rest of the backlog came too
	// late (found from outside, out24 D1). A release before them ignores
	// the fields.
	HeldUntil time.Time `json:"held_until,omitzero"`
	HeldAt    time.Time `json:"held_at,omitzero"`
}

func (a mark) equal(b mark) bool {
	return a.Watermark.Equal(b.Watermark) && a.Waiting.Equal(b.Waiting) && a.Deferred.Equal(b.Deferred) &&
		a.HeldUntil.Equal(b.HeldUntil) && a.HeldAt.Equal(b.HeldAt) &&
		slices.EqualFunc(a.Sources, b.Sources, func(x, y detect.SourceClock) bool { return x.Name == y.Name && x.Clock.Equal(y.Clock) }) &&
		slices.EqualFunc(a.Quiet, b.Quiet, func(x, y detect.SourceClock) bool {
			return x.Name == y.Name && x.Clock.Equal(y.Clock) && x.Lag == y.Lag
		})
}

// markFile is the state file's content: every partition's mark, and the
// floor.
type markFile struct {
	Version int `json:"version"`
	// Store is Config.Store of the run that wrote the file: the store
	// whose committed output the marks describe (empty in a file of a
	// release before op23a).
	Store string `json:"store,omitempty"`
	// Floor is the event time before which no call was acknowledged that
	// may not have been judged and committed (zero when unknown): a call
	// acknowledged for a partition without a mark yet, or behind every
	// mark (a backlog replayed), lowers it before it is acknowledged, so
	// that the replay at start reaches back to it.
	Floor time.Time `json:"floor,omitzero"`
	// Saved is the wall time the file was written (zero in a file of a
	// release before it was kept). It is rewritten at least every
	// stateRefresh while the collector runs, so that at the next start
	// the time since tells how long the collector was down, within that.
	Saved time.Time `json:"saved,omitzero"`
	// Freed are the partitions freed as idle (Pipeline.expireIdle) whose
	// calls the replay at start may still reach, with the watermark each
	// had then: the partition was empty after a commit, so every call of
	// it up to that watermark was judged and its output committed. They
	// are no partitions (nothing of them is restored); the replay at start
	// passes over their calls up to there and before Floor (freedCovers):
	// a call of a freed partition stored after the freeing had the file
	// rewritten without it first (comeback), and one acknowledged around
	// the freeing is covered by Floor alone. A release before them
	// ignores the field (and announces that output again).
	Freed []freedLine `json:"freed,omitempty"`
	// Run is "running" in every save while the collector runs and "stop"
	// in the save of its clean stop: the next start reads a crash in
	// "running" (empty in a file of a release before 2026-12-06: how that
	// run ended is unknown).
	Run string `json:"run,omitempty"`
	// Downtimes are the last DowntimesKept times the collector was down,
	// oldest first: each start adds the one before it. Kept here, where
	// the time each one starts is read from (Saved), so that they go with
	// the state they describe (a data directory copied or restored keeps
	// its own) and cost no other file; a release before them ignores the
	// field and the next save drops it.
	Downtimes []audit.Downtime `json:"downtimes,omitempty"`
	// Withdrawals are the withdrawals of stored findings that the store
	// could not take yet (audit.ErrUnavailable) when the file was written:
	// the pipeline tries them again at each commit, and the next start
	// queues them again: the marks saved meanwhile may cover the call
	// that settled the write, and the replay then takes its output as
	// committed and makes no withdrawal (review rev19w, D2: such a
	// withdrawal was lost in a crash). A release before them ignores the
	// field and such a withdrawal is lost, as it was.
	Withdrawals []audit.FindingChange `json:"withdrawals,omitempty"`
	// Counters are the values of the counters that go on across restarts
	// (Config.Counters: the findings counters; since rcn49 the calls,
	// failures and write states too), saved with the marks: they count
	// the output committed up to the marks, and a start begins the
	// counters at them and counts what its replay makes after the marks
	// (gate.recount, gate.countedBefore). A release before them ignores the field
	// (its counters start at 0, as they did); a file without it starts
	// them at 0, and its replay counts as before. Since cnt50 the values
	// are saved in a journal beside the file (CountersLog; countlog.go)
	// and this member is only read: from a file of rcn49's release.
	Counters json.RawMessage `json:"counters,omitempty"`
	// CountersLog names the journal that keeps the counters' values (since
	// cnt50) and its last record that goes with the marks. A release
	// before it ignores the member (its counters start at 0 and its
	// replay counts as before alrt48: Prometheus reads one reset) and its
	// next save drops it.
	CountersLog *countsRef `json:"counters_log,omitempty"`
	// Partitions come last, after the small members: a file cut short
	// (or damaged in its partitions) still gives the downtimes and the
	// withdrawals waiting, which a start keeps (readAside); a release
	// before adv46 wrote them first, and reads them in any order.
	Partitions []markLine `json:"partitions"`
}

// What markFile.Run says.
const (
	runRunning = "running"
	runStopped = "stop"
)

// DowntimesKept is how many downtimes the state file keeps: at most 9.6 KB
// of JSON (times in UTC), written with the file (at most once a second).
const DowntimesKept = 100

// runState is what the state file says of the collector's runs.
type runState struct {
	// store is markFile.Store.
	store string
	// run is markFile.Run.
	run       string
	downtimes []audit.Downtime
	// withdrawals is markFile.Withdrawals.
	withdrawals []audit.FindingChange
	// counts is markFile.Counters (read from a file of rcn49's release).
	counts json.RawMessage
	// countsLog is markFile.CountersLog.
	countsLog *countsRef
	// trouble, read at the start, says what was wrong with the file
	// (nil when nothing was).
	trouble *StateFileTrouble
}

// runState returns what the next save of the state file says of the runs:
// the caller holds floorMu.
func (p *Pipeline) runState() runState {
	r := runState{store: p.cfg.Store, run: runRunning, downtimes: p.downtimes, withdrawals: p.unstoredWithdrawals, countsLog: p.savedCountsLog}
	if p.cleanStop {
		r.run = runStopped
	}
	return r
}

type freedLine struct {
	Tenant    string    `json:"tenant"`
	Server    string    `json:"server"`
	Watermark time.Time `json:"watermark"`
}

// freedCovers reports whether a state file that keeps a partition freed
// at watermark wm, with floor floor, stands for the output of its calls
// dated t as committed: at or before wm, and before floor (a call of it
// acknowledged around the freeing is covered by the floor alone). The
// replay at start passes over the calls it covers (recover), or replays
// them silently when a later call of their partition is judged
// (gate.seed): nothing of them is made again. Output of a call it does not
// cover is dated no earlier than that call, so not covered either: the
// gate needs no bound by time of its own (gate.committed).
func freedCovers(wm, floor, t time.Time) bool {
	return !t.After(wm) && (floor.IsZero() || t.Before(floor))
}

// freedMark is what the pipeline keeps of a partition freed as idle:
// the watermark it was freed at, and the number (detect.Freed.Gen) of
// the partition it was freed as, or after a restart of the partition the
// replay made for it (or the engine's count then, if none): a partition
// of its key with a greater number was begun anew since, by a call
// acknowledged around or after the freeing, so the watermark no longer
// says what of its calls was committed.
type freedMark struct {
	wm  time.Time
	gen uint64
	// disk: the state file on disk keeps it (read at the start, or
	// written since it was freed).
	disk bool
}

// freedWritten notes that the state file on disk now keeps every freed
// partition in memory. floorMu held.
func (p *Pipeline) freedWritten() {
	for k, m := range p.freed {
		if !m.disk {
			m.disk = true
			p.freed[k] = m
		}
	}
	clear(p.stale)
}

// maxFreed bounds how many freed partitions the state file keeps: past
// it the one freed at the earliest watermark is dropped (its calls, if
// replayed, are announced again).
const maxFreed = 1000

// stateRefresh is how often the state file is rewritten when nothing in
// it changed: how far its Saved time may be behind a crash.
const stateRefresh = 10 * time.Second

type markLine struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
	mark
}

// readMarks reads the partitions' marks kept by the last run, and the
// watermarks of the partitions freed as idle it kept. saved is
// the latest wall time the file shows that run alive (its Saved time, or
// in an older file the latest mark or delivery in it; zero when it shows
// none). lost is set when the file exists but cannot be read or
// understood: what it said is unknown (so is a file missing where the
// store holds output; recover tells that case). Such a file is set aside
// at wall time now (setAside), so that the first save does not overwrite
// it, and run keeps what of it can be used without the rest
// (run.trouble says it).
func readMarks(path string, now time.Time, log *slog.Logger) (marks map[detect.PartitionKey]mark, freed map[detect.PartitionKey]time.Time, floor, saved time.Time, lost bool, run runState) {
	if path == "" {
		return nil, nil, time.Time{}, time.Time{}, false, runState{}
	}
	removeTemps(path, log)
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			run, tr := readAside(path, now, markFile{}, nil, err, nil, log)
			run.trouble = &tr
			return nil, nil, time.Time{}, time.Time{}, true, run
		}
		return nil, nil, time.Time{}, time.Time{}, false, runState{}
	}
	f, good, err := decodeMarks(b)
	if err != nil {
		run, tr := readAside(path, now, f, good, nil, err, log)
		run.trouble = &tr
		return nil, nil, time.Time{}, time.Time{}, true, run
	}
	saved = f.Saved
	run = runState{run: f.Run, downtimes: f.Downtimes, withdrawals: f.Withdrawals, counts: f.Counters, countsLog: f.CountersLog}
	later := func(t time.Time) {
		if t.After(saved) {
			saved = t
		}
	}
	m := make(map[detect.PartitionKey]mark, len(f.Partitions))
	for _, l := range f.Partitions {
		m[detect.PartitionKey{Tenant: l.Tenant, Server: l.Server}] = l.mark
		later(l.At)
		for _, s := range l.Sources {
			later(s.Seen)
		}
	}
	if len(f.Freed) > 0 {
		freed = make(map[detect.PartitionKey]time.Time, len(f.Freed))
		for _, l := range f.Freed {
			freed[detect.PartitionKey{Tenant: l.Tenant, Server: l.Server}] = l.Watermark
		}
	}
	return m, freed, f.Floor, saved, false, run
}

// clampAhead lowers, in the marks read from the state file at wall time
// now, every watermark and source clock ahead of now + skew to there,
// logging each partition it changes. No watermark passes
// the wall clock by more than the skew, so none the last run saved can be
// further ahead than that unless the clock was ahead then (set right across
// the restart) or the file was edited: taken as it was, such a watermark
// had every new call of its partition counted too late, never judged, until
// the wall clock reached it (adv23's D1). Lowered, it no longer stands for
// the output of the stored calls dated after it as committed: the replay
// judges those again, and their output is announced again (findings
// recognized by their ids, write states stored over themselves), the
// lesser harm.
func clampAhead(marks map[detect.PartitionKey]mark, now time.Time, skew time.Duration, log *slog.Logger) {
	limit := now.Add(skew)
	clamped := 0
	for k, m := range marks {
		saved, savedHeldAt := m.Watermark, m.HeldAt
		// lowered names what was ahead: the WARN said "watermark" alone,
		// with saved_watermark equal to watermark, when only the hold's
		// mark or a source's clock was (found by adv25).
		var lowered []string
		lower := func(t *time.Time, name string) {
			if t.After(limit) {
				*t = limit
				if !slices.Contains(lowered, name) {
					lowered = append(lowered, name)
				}
			}
		}
		// A restored source's clock ahead would hold the watermark at the
		// skew ahead of the wall clock while it delivers.
		lower(&m.Watermark, "watermark")
		lower(&m.HeldAt, "held_at")
		for _, srcs := range [][]detect.SourceClock{m.Sources, m.Quiet} {
			for i := range srcs {
				lower(&srcs[i].Clock, "sources' clocks")
			}
		}
		if len(lowered) == 0 {
			continue
		}
		marks[k] = m
		if clamped++; clamped <= 10 {
			log.Warn("a partition's watermark in the state file is ahead of the wall clock by more than max_clock_skew "+
				"(the clock was ahead when the file was saved, or the file was edited or comes from elsewhere): lowered, with its sources' clocks, to the wall clock plus the skew; "+
				"its stored calls dated after that are judged again, and their output announced again",
				"tenant", k.Tenant, "server", k.Server, "lowered", strings.Join(lowered, ", "), "saved_watermark", saved, "watermark", m.Watermark,
				"saved_held_at", savedHeldAt, "held_at", m.HeldAt, "max_clock_skew", skew)
		}
	}
	if clamped > 10 {
		log.Warn("more partitions' watermarks in the state file were ahead of the wall clock and lowered (the first 10 logged above)", "partitions", clamped)
	}
}

// savedBefore returns the latest wall time the state file shows the last
// run alive (saved: readMarks), read at wall time now, as the start of the
// downtime before this start: saved itself, now when saved is ahead of now by
// at most skew (a clock stepped back a little across the restart: down for no
// time), and zero, unknown, when it is further ahead (the clock was ahead when
// the file was saved and set right across the restart, or the file was edited
// or comes from elsewhere), logged. Taken as it was, such a time made a
// downtime that ends before it begins ("from 9999-12-31T23:59:59Z to" now),
// kept in the history of downtimes for the next DowntimesKept starts (found
// by adv25).
func savedBefore(saved, now time.Time, skew time.Duration, path string, log *slog.Logger) time.Time {
	switch {
	case !saved.After(now):
		return saved
	case !saved.After(now.Add(skew)):
		return now
	}
	log.Warn("the state file shows the last run alive at a time ahead of the wall clock by more than max_clock_skew "+
		"(its saved time, a partition's mark time or a source's last delivery: the clock was ahead when it was saved, or the file was edited or comes from elsewhere): "+
		"the downtime is unknown, and none is recorded for this start",
		"path", path, "saved", saved.UTC(), "now", now.UTC(), "max_clock_skew", skew)
	return time.Time{}
}

// validDowntimes returns the downtimes the state file keeps without those
// that end before they begin, logging how many it drops: a release before
// savedBefore kept such a one when the file showed the last run alive ahead
// of the wall clock, and a file edited by hand may hold them; shown as they
// were, /api/v1/status said serve was down -9223372036 seconds (found by
// adv25).
func validDowntimes(ds []audit.Downtime, path string, log *slog.Logger) []audit.Downtime {
	kept := slices.DeleteFunc(slices.Clone(ds), backward)
	if n := len(ds) - len(kept); n > 0 {
		log.Warn("the state file keeps downtimes that end before they begin (saved by a release before 2026-12-07 from a time ahead of the wall clock, or edited): dropped from the history",
			"path", path, "dropped", n, "kept", len(kept))
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// ReadDowntimes returns the downtimes the state file at path keeps, oldest
// first: what Pipeline.Downtimes returned in the run that last saved it,
// for a reader of a data directory with serve stopped (mcpaudit timeline
// --data-dir). None, and no error, when the file does not exist (a data
// directory serve never ran on, or restored without it); an error when it
// cannot be read or understood, as a start would take it for lost, with
// the downtimes all the same when they could be read whole (a file cut
// short or damaged after them, as a start keeps them: readAside).
func ReadDowntimes(path string) ([]audit.Downtime, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the state file: %w", err)
	}
	f, good, err := decodeMarks(b)
	if err != nil {
		// What a start keeps of such a file (readAside): the downtimes
		// when they were read whole.
		var ds []audit.Downtime
		if !errors.Is(err, errOtherVersion) && slices.Contains(good, "downtimes") {
			ds = slices.DeleteFunc(f.Downtimes, backward)
		}
		return ds, fmt.Errorf("cannot read the state file %s: %w", path, err)
	}
	// As a start takes them (validDowntimes).
	return slices.DeleteFunc(f.Downtimes, backward), nil
}

// backward reports whether d ends before it begins (validDowntimes).
func backward(d audit.Downtime) bool { return d.From.After(d.To) }

// StateStore returns the store the state file at path describes
// (Config.Store of the run that wrote it): empty, and no error, for a file
// of a release before it was written, or none. An error when the file
// cannot be read or understood.
func StateStore(path string) (store string, exists bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", true, fmt.Errorf("cannot read the state file: %w", err)
	}
	f, _, err := decodeMarks(b)
	if err != nil {
		return "", true, fmt.Errorf("cannot read the state file %s: %w", path, err)
	}
	return f.Store, true, nil
}

// marksOf returns the marks of the engine's partitions at wall time now.
func marksOf(e *detect.Engine, now time.Time) map[detect.PartitionKey]mark {
	m := map[detect.PartitionKey]mark{}
	for k, t := range e.Watermarks() {
		m[k] = mark{Watermark: t, At: now}
	}
	for k, t := range e.Waiting() {
		mk := m[k]
		mk.Waiting = t
		m[k] = mk
	}
	for k, t := range e.Deferred() {
		mk := m[k]
		mk.Deferred = t
		m[k] = mk
	}
	for k, srcs := range e.ActiveSources(now, recoverySource) {
		if len(srcs) > 0 {
			mk := m[k]
			mk.Sources = srcs
			m[k] = mk
		}
	}
	for k, srcs := range e.QuietSources(now) {
		if len(srcs) > 0 {
			mk := m[k]
			mk.Quiet = srcs
			m[k] = mk
		}
	}
	for k, h := range e.Holds(now) {
		mk := m[k]
		mk.HeldUntil, mk.HeldAt = h.Until, h.At
		m[k] = mk
	}
	return m
}

// saveMarks writes the partitions' marks after a commit, at most once a
// second unless forced, the withdrawals the store refused changed (the
// next start must know which it still has to make, and that this run
// counted them) or a partition has its first watermark (firstMark),
// atomically (a temporary file renamed over the old one).
func (p *Pipeline) saveMarks(marks map[detect.PartitionKey]mark, force bool) {
	if p.cfg.StateFile == "" {
		return
	}
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	floor := floorOf(marks, p.queued)
	p.pruneFreed(floor)
	// One reading of the clock: the file's Saved time and marksSaved must
	// agree, or the next refresh is put off by what the clock moved
	// between two readings.
	now := p.now()
	since := now.Sub(p.marksSaved)
	// Counts waiting to be shown change the file too: they are shown
	// once it keeps them (Config.Counters).
	counting := p.cfg.Counters != nil && p.cfg.Counters.CountsPending()
	if maps.EqualFunc(marks, p.savedMarks, mark.equal) && floor.Equal(p.floor) && !p.freedChanged && !p.withdrawalsChanged && !counting && since < stateRefresh {
		p.marksCurrent = now
		return
	}
	if !force && !p.withdrawalsChanged && since < time.Second && !firstMark(marks, p.savedMarks) {
		return
	}
	run := p.runState()
	if p.cfg.Counters != nil {
		// Taken here, after the commit that stored the output they count
		// (the engine goroutine: nothing was judged since), with the
		// marks of that commit.
		ref, publish, err := p.saveCounts()
		// Shown whether or not the file could be written: a full disk
		// must not keep findings from the alerts. A crash before the next
		// save may then show Prometheus a reset.
		defer publish()
		if err != nil {
			// Marks saved without the counts that go with them would have
			// a start skip counting calls whose counts it does not have.
			p.warnStateLocked(err)
			return
		}
		run.countsLog = ref
		if countsSaved != nil {
			countsSaved()
		}
	}
	if err := writeMarks(p.cfg.StateFile, marks, p.freed, floor, now, run); err != nil {
		p.warnStateLocked(err)
		if !renamed(err) {
			return
		}
	}
	p.freedWritten()
	p.savedMarks, p.marksSaved, p.floor, p.freedChanged, p.withdrawalsChanged = marks, now, floor, false, false
	p.savedCountsLog = run.countsLog
	p.marksCurrent = now
}

// countsSaved, when set (tests), is called between the save of the
// counters in their journal and the write of the state file: a test kills
// the process there (kill -9), which no real part can be made to do at
// that point.
var countsSaved func()

// saveCounts saves the counters' values in their journal (countlog.go)
// and returns what the state file keeps of it, and the function that
// shows the counts saved (Counters.SaveCounts). The first save of a run
// writes a new journal with every value, and so does a save once the
// deltas outgrow the snapshot or after an append failed; the others
// append what changed, if anything did. On an error nothing may be
// written that names the counts taken (publish still shows them). The
// caller holds floorMu.
func (p *Pipeline) saveCounts() (*countsRef, func(), error) {
	l := p.counts
	full := l == nil || l.broken || l.deltas > max(l.snapshot, compactAfter)
	names := countLogNames(p.cfg.StateFile)
	file := names[0]
	if l != nil && l.file == names[0] || l == nil && p.savedCountsLog != nil && p.savedCountsLog.File == names[0] {
		file = names[1]
	}
	if full && p.savedCountsLog != nil && p.savedCountsLog.File == file {
		// The state file on disk still names that journal (its last
		// write failed after a new journal was written): it is not
		// written over.
		if l == nil || l.broken {
			return nil, func() {}, fmt.Errorf("cannot save the counters: the journal %s is the one the state file names, and %s could not be appended to", file, l.file)
		}
		full = false
	}
	v, publish := p.cfg.Counters.SaveCounts(full)
	if !full {
		if v != nil {
			if err := l.append(v); err != nil {
				return nil, publish, err
			}
		}
		return l.ref(), publish, nil
	}
	var seq uint64 = 1
	if l != nil {
		seq = l.seq + 1
	} else if p.savedCountsLog != nil {
		seq = p.savedCountsLog.Seq + 1
	}
	nl, err := writeCountLog(filepath.Dir(p.cfg.StateFile), file, seq, v)
	if err != nil {
		if l != nil {
			// The deltas since its last record were taken: only a new
			// snapshot holds them now.
			l.broken = true
		}
		return nil, publish, err
	}
	l.close()
	p.counts = nl
	return nl.ref(), publish, nil
}

// firstMark reports whether marks gives a partition its first watermark:
// one the file last saved (saved) holds without a watermark, or not at all.
// A restart withdraws nothing of a partition without a mark: it cannot tell
// a withdrawal lost in a crash from a call counted too late
// (gate.lostWithdrawal). Saved up to a second late, the file said that of a
// partition whose first output the store held, and a withdrawal a late call
// made in that second and a crash lost was lost for good (found by fl22a:
// TestRestart_WithdrawLostBeforeFirstMarkSaved). A later watermark may
// wait: a mark behind the store's output makes a restart withdraw more
// readily, not less. A watermark before the one saved is a first one too:
// the partition was freed as idle and brought back before the file was
// saved again (it still holds the old partition's mark, ahead of what the
// new one committed; found by rev22: TestSaveMarks_BackWithinSecond).
func firstMark(marks, saved map[detect.PartitionKey]mark) bool {
	for k, m := range marks {
		if !m.Watermark.IsZero() && (saved[k].Watermark.IsZero() || m.Watermark.Before(saved[k].Watermark)) {
			return true
		}
	}
	return false
}

// floorOf returns the earliest event time a call not yet judged and
// committed may have: the earliest mark, or call queued for the engine.
func floorOf(marks map[detect.PartitionKey]mark, queued map[int64]int) time.Time {
	var floor time.Time
	lower := func(t time.Time) {
		if !t.IsZero() && (floor.IsZero() || t.Before(floor)) {
			floor = t
		}
	}
	for _, m := range marks {
		lower(m.Watermark)
		lower(m.Waiting)
	}
	for t := range queued {
		lower(time.Unix(0, t).UTC())
	}
	return floor
}

// lowerFloor makes the state file's floor reach back to t, the earliest
// call of a batch about to be queued, before the batch is acknowledged;
// dequeued notes that the batch was taken by the engine or dropped. The
// partitions freed as idle that the batch brings back left the file
// before its calls were stored (comeback).
func (p *Pipeline) lowerFloor(t time.Time) error {
	if p.cfg.StateFile == "" {
		return nil
	}
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	p.queued[t.UnixNano()]++
	if !p.floor.IsZero() && !t.Before(p.floor) {
		return nil
	}
	// Nothing was saved yet, or the batch reaches behind what was: the
	// file must say so before the calls are acknowledged.
	err := writeMarks(p.cfg.StateFile, p.savedMarks, p.freed, t, p.now(), p.runState())
	if err != nil && !renamed(err) {
		return fmt.Errorf("cannot save the state file: %w", err)
	}
	p.freedWritten()
	p.floor = t
	return err
}

// comeback forgets the partitions freed as idle that batches bring back,
// and writes the state file without them before their calls are stored;
// an error when it cannot, and the request is then refused (the entries
// are kept, so that the next call of them tries the write again).
//
// The file's freed watermarks stand for the output of the stored calls of
// those partitions dated before its floor (freedCovers) as committed.
// A call of a freed partition stored while the file still names it would
// be taken so after a crash before its output was committed: a late call,
// stored and not acknowledged (the process died in between) and never
// sent again, or acknowledged while the file could not be written
// (review13c). So the entry leaves the file first. This writes the file on
// the way to an acknowledgement once per partition that comes back after
// it was freed (a quiet spell of correlation_window + allowed_lateness at
// least), and only when the file on disk keeps one of them. It also
// counts the request's partitions as arriving until arrived is called,
// once the floor covers its calls (lowerFloor) or it failed: a partition
// the engine frees meanwhile is not kept as freed (free), or a save could
// write it so while its calls are stored and not yet covered.
func (p *Pipeline) comeback(batches []audit.Batch) (arrived func(), err error) {
	arrived, _, _, err = p.comebackFreed(batches)
	return arrived, err
}

// comebackFreed is comeback that also returns the freed entries it took
// out (back) and the file's floor then: a call of one of them that the
// store already held, dated where the entry covers (freedCovers), was
// judged and committed before it was freed (resent).
func (p *Pipeline) comebackFreed(batches []audit.Batch) (arrived func(), back map[detect.PartitionKey]freedMark, floor time.Time, err error) {
	if p.cfg.StateFile == "" {
		return func() {}, nil, time.Time{}, nil
	}
	keys := partitionsOf(batches)
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	if p.arriving == nil {
		p.arriving = map[detect.PartitionKey]int{}
	}
	onDisk := false
	floor = p.floor
	for _, k := range keys {
		p.arriving[k]++
		if m, ok := p.freed[k]; ok {
			if back == nil {
				back = map[detect.PartitionKey]freedMark{}
			}
			back[k] = m
			delete(p.freed, k)
			onDisk = onDisk || m.disk
		}
		onDisk = onDisk || p.stale[k]
	}
	done := func() {
		for _, k := range keys {
			if p.arriving[k]--; p.arriving[k] <= 0 {
				delete(p.arriving, k)
			}
		}
	}
	if back != nil {
		p.freedChanged = true
	}
	if onDisk {
		now := p.now()
		if err := writeMarks(p.cfg.StateFile, p.savedMarks, p.freed, p.floor, now, p.runState()); err != nil {
			if !renamed(err) {
				// The file still keeps them: kept here too, so that the
				// next call of them tries again rather than being stored
				// under it.
				maps.Copy(p.freed, back)
				done()
				return nil, nil, time.Time{}, fmt.Errorf("cannot save the state file before the calls of a partition freed as idle are stored: %w", err)
			}
			p.warnStateLocked(err)
		}
		p.marksSaved, p.freedChanged = now, false
		p.freedWritten()
	}
	return func() {
		p.floorMu.Lock()
		done()
		p.floorMu.Unlock()
	}, back, floor, nil
}

// resent returns the indexes, in order, of the records of recs (one
// request) that are calls sent again of a partition freed as idle and
// judged before it was freed: the store held them already (held, less
// those it refused for another response, differ, and those that may
// complete the stored call with an answer, answered), and the freed entry
// the request took out of the state file (back, with the file's floor
// then) covers them. The replay at start passes over the calls such an
// entry covers; judged again, a re-sent one began its partition anew and
// had its write states and finding announced again (review rev14a). Only
// while this request is the partition's only one between comeback and
// its acknowledgement, and no append of it failed: another request may
// have stored the call (held by this one) and not had it judged.
func (p *Pipeline) resent(recs []audit.Record, back map[detect.PartitionKey]freedMark, floor time.Time, held, differ, answered []int) []int {
	var out []int
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	for _, i := range held {
		if d, a := at(&differ, i), at(&answered, i); d || a {
			continue
		}
		c := recs[i].Call
		k := detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}
		m, ok := back[k]
		if !ok || !freedCovers(m.wm, floor, c.Time) || p.arriving[k] != 1 || p.doubted[k] {
			continue
		}
		out = append(out, i)
	}
	p.keepFreed(recs, back, out)
	return out
}

// keepFreed puts back the freed entries of back whose partition's calls
// in recs were all passed over (resent, the indexes in skip): nothing new
// of it was stored, so the entry still says what of it was judged and
// committed, and the next restart passes over those calls again rather
// than judging them as new. Only while this request is the partition's
// only one in flight and no append of it failed, as for resent; one that
// came and went since comeback had its calls queued, covered by the floor
// until the engine takes them and begins the partition anew (its number
// then drops the entry, pruneFreed). floorMu held.
func (p *Pipeline) keepFreed(recs []audit.Record, back map[detect.PartitionKey]freedMark, skip []int) {
	if len(skip) == 0 {
		return
	}
	passed := map[detect.PartitionKey]int{}
	for _, i := range skip {
		c := recs[i].Call
		passed[detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}]++
	}
	for i := range recs {
		c := recs[i].Call
		k := detect.PartitionKey{Tenant: c.Tenant, Server: c.Server}
		if _, ok := passed[k]; ok {
			passed[k]--
		}
	}
	for k, left := range passed {
		if _, ok := p.freed[k]; left != 0 || ok || p.arriving[k] != 1 || p.doubted[k] {
			continue
		}
		m := back[k]
		m.disk = false
		p.freed[k] = m
		p.freedChanged = true
	}
}

// unsure notes the partitions of batches, whose append failed, as
// doubted: the store may hold some of their calls all the same.
func (p *Pipeline) unsure(batches []audit.Batch) {
	if p.cfg.StateFile == "" {
		return
	}
	keys := partitionsOf(batches)
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	if p.doubted == nil {
		p.doubted = map[detect.PartitionKey]bool{}
	}
	for _, k := range keys {
		p.doubted[k] = true
	}
}

// partitionsOf returns the partitions the calls of batches fall in, each
// once, in the order they come.
func partitionsOf(batches []audit.Batch) []detect.PartitionKey {
	var keys []detect.PartitionKey
	var seen map[detect.PartitionKey]bool // past a few keys
	var last detect.PartitionKey
	for _, b := range batches {
		for _, r := range b.Records {
			k := detect.PartitionKey{Tenant: r.Call.Tenant, Server: r.Call.Server}
			if len(keys) > 0 && k == last {
				continue // a batch is mostly one server's
			}
			last = k
			switch {
			case seen != nil:
				if seen[k] {
					continue
				}
				seen[k] = true
			case slices.Contains(keys, k):
				continue
			case len(keys) == 8:
				seen = make(map[detect.PartitionKey]bool, 16)
				for _, k := range keys {
					seen[k] = true
				}
				seen[k] = true
			}
			keys = append(keys, k)
		}
	}
	return keys
}

// free notes the partitions the engine freed as idle: their calls up to
// the watermarks they had were judged and their output committed (the
// engine frees after a commit). Engine goroutine.
func (p *Pipeline) free(freed []detect.Freed) {
	if p.cfg.StateFile == "" || len(freed) == 0 {
		return
	}
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	for _, f := range freed {
		if f.Watermark.IsZero() {
			continue // never judged anything: nothing committed
		}
		if p.arriving[f.PartitionKey] > 0 || p.doubted[f.PartitionKey] {
			// A request of it is being stored, its calls not yet covered
			// by the floor, or a failed one may have stored some: in
			// doubt, its output is announced again.
			continue
		}
		p.freed[f.PartitionKey] = freedMark{wm: f.Watermark, gen: f.Gen}
		p.freedChanged = true
	}
	for len(p.freed) > maxFreed {
		var first detect.PartitionKey
		var at time.Time
		for k, m := range p.freed {
			if at.IsZero() || m.wm.Before(at) {
				first, at = k, m.wm
			}
		}
		p.dropFreed(first, p.freed[first])
	}
}

// pruneFreed drops the freed partitions begun anew in the engine since
// (a call acknowledged before the freeing and taken after it: its output
// may not be committed yet), and those the replay at start can no longer
// reach: freed at a watermark before floor less everything a call after
// floor can correlate with (recover's horizon). Engine goroutine; the
// caller holds floorMu.
func (p *Pipeline) pruneFreed(floor time.Time) {
	if len(p.freed) == 0 {
		return
	}
	var reach time.Time
	if !floor.IsZero() {
		reach = floor.Add(-p.replayReach())
	}
	for k, m := range p.freed {
		if gen, ok := p.eng.Gen(k); ok && gen > m.gen || m.wm.Before(reach) {
			p.dropFreed(k, m)
		}
	}
}

// dropFreed forgets the freed partition k; while the file on disk may
// still keep it, it is stale: the file is written again before a call of
// it is stored (comeback). floorMu held.
func (p *Pipeline) dropFreed(k detect.PartitionKey, m freedMark) {
	delete(p.freed, k)
	p.freedChanged = true
	if m.disk {
		if p.stale == nil {
			p.stale = map[detect.PartitionKey]bool{}
		}
		p.stale[k] = true
	}
}

// warnState logs a failure to write the state file, at most once a minute.
func (p *Pipeline) warnState(err error) {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	p.warnStateLocked(err)
}

func (p *Pipeline) warnStateLocked(err error) {
	if now := p.now(); now.Sub(p.stateWarned) >= time.Minute {
		p.stateWarned = now
		p.log.Error("cannot save the partitions' watermarks: calls are still acknowledged and judged (except those of a server freed as idle that comes back, refused until the file can be written), but after a crash now a backlog acknowledged since the last save may not be judged again, and restarts replay from further back (logged once a minute)",
			"path", p.cfg.StateFile, "err", err)
	}
}

// dequeued notes that a batch whose earliest call is t left the queue;
// locked is set when the caller holds floorMu.
func (p *Pipeline) dequeued(t time.Time, locked bool) {
	if p.cfg.StateFile == "" {
		return
	}
	if !locked {
		p.floorMu.Lock()
		defer p.floorMu.Unlock()
	}
	k := t.UnixNano()
	if p.queued[k]--; p.queued[k] <= 0 {
		delete(p.queued, k)
	}
}

// earliest returns the event time of the earliest call of a batch.
func earliest(b audit.Batch) time.Time {
	var t time.Time
	for _, r := range b.Records {
		if ct := r.Call.Time; t.IsZero() || ct.Before(t) {
			t = ct
		}
	}
	return t
}

// writeMarks writes the state file at path, saved at wall time saved.
// freed is read here: the caller holds floorMu.
func writeMarks(path string, marks map[detect.PartitionKey]mark, freed map[detect.PartitionKey]freedMark, floor, saved time.Time, run runState) (err error) {
	defer func() {
		if err != nil && !renamed(err) {
			err = &stateWriteError{name: filepath.Base(path), err: err}
		}
	}()
	f := markFile{Version: 2, Store: run.store, Floor: floor, Saved: saved, Run: run.run, Downtimes: run.downtimes, Withdrawals: run.withdrawals,
		CountersLog: run.countsLog}
	for k, m := range marks {
		f.Partitions = append(f.Partitions, markLine{Tenant: k.Tenant, Server: k.Server, mark: m})
	}
	for k, m := range freed {
		f.Freed = append(f.Freed, freedLine{Tenant: k.Tenant, Server: k.Server, Watermark: m.wm})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	// The rename itself is made durable: a call stored after a comeback's
	// write must not find the old file back after a power loss.
	return writeFileSynced(path, b, datadir.FileMode)
}

// writeFileSynced is datadir.WriteFileSynced; a variable so that a test
// can make the directory sync after the rename fail, which a real file
// system here cannot be made to do.
var writeFileSynced = datadir.WriteFileSynced

// oldTempPattern names the temporary files the state file and its
// counters' journals were written to before datadir.WriteFileSynced: a
// version before it killed while it saved left them.
const oldTempPattern = ".partitions-*"

// removeTemps removes, at the start, the temporary files of the state file
// at path and of its counters' journals left by a run killed while it
// saved (kill -9, a crash, a power loss between the write and the rename):
// the removal on failure never ran, and each start after such a crash left
// one more, as large as the state file (found by adv46). One serve per
// data directory (its LOCK), so none of them is being written.
func removeTemps(path string, log *slog.Logger) {
	globs := []string{filepath.Join(filepath.Dir(path), oldTempPattern), datadir.TempGlob(path)}
	for _, name := range countLogNames(path) {
		globs = append(globs, datadir.TempGlob(filepath.Join(filepath.Dir(path), name)))
	}
	removed := 0
	for _, g := range globs {
		left, _ := filepath.Glob(g)
		for _, f := range left {
			if err := os.Remove(f); err == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		log.Info("removed the temporary files of state files a run stopped while saving left behind", "dir", filepath.Dir(path), "files", removed)
	}
}

// stateWriteError is a state file that could not be written: a sender
// refused for it (lowerFloor, comeback) is told the file's name
// (Writing), not the temporary file's.
type stateWriteError struct {
	name string
	err  error
}

func (e *stateWriteError) Error() string { return e.err.Error() }

func (e *stateWriteError) Unwrap() error { return e.err }

// Writing names the file for a sender's answer.
func (e *stateWriteError) Writing() string { return e.name + " (the state file)" }

// renamed reports whether err, from writeMarks, left the new file in
// place.
func renamed(err error) bool {
	return errors.Is(err, datadir.ErrDirNotSynced)
}

// debugMemoryLimit returns the runtime's memory limit (GOMEMLIMIT or
// debug.SetMemoryLimit), math.MaxInt64 when none is set.
func debugMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }
