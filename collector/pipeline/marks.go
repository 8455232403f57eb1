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
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
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
}

func (a mark) equal(b mark) bool {
	return a.Watermark.Equal(b.Watermark) && a.Waiting.Equal(b.Waiting) && a.Deferred.Equal(b.Deferred) &&
		slices.EqualFunc(a.Sources, b.Sources, func(x, y detect.SourceClock) bool { return x.Name == y.Name && x.Clock.Equal(y.Clock) }) &&
		slices.EqualFunc(a.Quiet, b.Quiet, func(x, y detect.SourceClock) bool {
			return x.Name == y.Name && x.Clock.Equal(y.Clock) && x.Lag == y.Lag
		})
}

// markFile is the state file's content: every partition's mark, and the
// floor.
type markFile struct {
	Version    int        `json:"version"`
	Partitions []markLine `json:"partitions"`
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
}

// stateRefresh is how often the state file is rewritten when nothing in
// it changed: how far its Saved time may be behind a crash.
const stateRefresh = 10 * time.Second

type markLine struct {
	Tenant string `json:"tenant"`
	Server string `json:"server"`
	mark
}

// readMarks reads the partitions' marks kept by the last run. saved is
// the latest wall time the file shows that run alive (its Saved time, or
// in an older file the latest mark or delivery in it; zero when it shows
// none). lost is set when the file exists but cannot be read or
// understood: what it said is unknown (so is a file missing where the
// store holds output; recover tells that case).
func readMarks(path string, log *slog.Logger) (marks map[detect.PartitionKey]mark, floor, saved time.Time, lost bool) {
	if path == "" {
		return nil, time.Time{}, time.Time{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot read the partitions' watermarks", "path", path, "err", err)
			return nil, time.Time{}, time.Time{}, true
		}
		return nil, time.Time{}, time.Time{}, false
	}
	var f markFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 2 {
		log.Warn("cannot read the partitions' watermarks", "path", path, "err", err, "version", f.Version)
		return nil, time.Time{}, time.Time{}, true
	}
	saved = f.Saved
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
	return m, f.Floor, saved, false
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
	return m
}

// saveMarks writes the partitions' marks after a commit, at most once a
// second unless forced, atomically (a temporary file renamed over the old
// one).
func (p *Pipeline) saveMarks(marks map[detect.PartitionKey]mark, force bool) {
	if p.cfg.StateFile == "" {
		return
	}
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	floor := floorOf(marks, p.queued)
	// One reading of the clock: the file's Saved time and marksSaved must
	// agree, or the next refresh is put off by what the clock moved
	// between two readings.
	now := p.now()
	since := now.Sub(p.marksSaved)
	if maps.EqualFunc(marks, p.savedMarks, mark.equal) && floor.Equal(p.floor) && since < stateRefresh || !force && since < time.Second {
		return
	}
	if err := writeMarks(p.cfg.StateFile, marks, floor, now); err != nil {
		p.warnStateLocked(err)
		return
	}
	p.savedMarks, p.marksSaved, p.floor = marks, now, floor
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
// done notes that the batch was taken by the engine or dropped.
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
	if err := writeMarks(p.cfg.StateFile, p.savedMarks, t, p.now()); err != nil {
		return fmt.Errorf("cannot save the state file: %w", err)
	}
	p.floor = t
	return nil
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
		p.log.Error("cannot save the partitions' watermarks: calls are still acknowledged and judged, but after a crash now a backlog acknowledged since the last save may not be judged again, and restarts replay from further back (logged once a minute)",
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
func writeMarks(path string, marks map[detect.PartitionKey]mark, floor, saved time.Time) error {
	f := markFile{Version: 2, Floor: floor, Saved: saved}
	for k, m := range marks {
		f.Partitions = append(f.Partitions, markLine{Tenant: k.Tenant, Server: k.Server, mark: m})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".partitions-*")
	if err != nil {
		return fmt.Errorf("cannot create the state file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// debugMemoryLimit returns the runtime's memory limit (GOMEMLIMIT or
// debug.SetMemoryLimit), math.MaxInt64 when none is set.
func debugMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }
