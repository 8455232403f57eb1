package forward

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// journalExt names the journal of one process in the buffer directory;
// journalNewExt the file it is made in, renamed to journalExt once locked
// and headed, so that no scan ever finds a journal its process has not
// locked yet, or one without its header.
const (
	journalExt    = ".journal"
	journalNewExt = ".journal.new"
)

// journalCompactBytes is the size past which a journal with calls in
// flight is rewritten with those entries only, once they are less than half
// of it. A journal with nothing in flight is emptied at once.
const journalCompactBytes = 1 << 20

// journalShare is the part of MaxBufferBytes the calls in flight of one
// journal may take: their B lines (requests of up to 16 MiB each) stop
// being written past it. The file itself stays under about twice that
// plus journalCompactBytes (it is rewritten once its ended lines are more
// than half), and so does what a recovery reads into memory.
const journalShare = 8

// journalWarnEvery is how often, at most, a relay logs the calls it left
// out of its journal past the bound.
const journalWarnEvery = time.Minute

// Journal is the list of the requests in flight of one process, kept
// beside the segments: a header line "S <source>" (the process's
// Mcpaudit-Source, quoted as a Go string), a line "B <entry> <record>" when a request goes
// upstream, its record as it would be written without a response, and a
// line "E <entry>" when its exchange ended. The file is locked while the
// process lives; the next Forwarder on the directory that finds it
// unlocked buffers the records of the entries that never ended and deletes
// it. Lines reach the page cache with one write each and are never synced:
// a process crash loses none, a machine crash loses those of the last
// seconds. It is safe for concurrent use.
type Journal struct {
	f *Forwarder

	mu    sync.Mutex
	fh    *os.File // nil once closed or when it could not be opened
	off   bool     // a write failed: nothing is written any more
	path  string
	size  int64
	head  int                 // bytes of the header line
	open  map[uint64][]byte   // begun, not ended: their B lines
	live  int64               // bytes of the B lines in open
	early map[uint64]struct{} // ended before their Begin
	buf   []byte
	// Past the bound: calls left out since the last log line, and when
	// that line was written.
	skipped  int
	warnedAt time.Time
	skip     map[uint64]struct{} // begun past the bound: no B line, so no E line
}

// openJournal creates and locks this process's journal.
func (f *Forwarder) openJournal() (*Journal, error) {
	head := journalHeader(f.cfg.Source)
	fh, path, err := f.createJournal(head)
	if err != nil {
		return nil, err
	}
	return &Journal{f: f, fh: fh, path: path, size: int64(len(head)), head: len(head),
		open: make(map[uint64][]byte), early: make(map[uint64]struct{}), skip: make(map[uint64]struct{})}, nil
}

// journalHeader is the first line of a journal: the source its calls are
// sent under, so that a relay that recovers them sends them under the dead
// relay's source, not its own (prox17).
func journalHeader(source string) []byte {
	return append(strconv.AppendQuote([]byte("S "), source), '\n')
}

// createJournal creates, locks and writes a new journal file with content
// (its header first) under a name no scan takes, and then gives it its
// journal name: a journal is locked and headed from the moment it is one.
// Before, a relay killed between the create and its first line left an
// empty journal that a scan had to take for one not yet locked by its
// live process, and left for a minute: after a clean stop of the next
// relay within that minute it stayed behind (prox17).
func (f *Forwarder) createJournal(content []byte) (*os.File, string, error) {
	name := fmt.Sprintf("%020d-%d", time.Now().UnixNano(), os.Getpid())
	tmp := filepath.Join(f.cfg.BufferDir, name+journalNewExt)
	path := filepath.Join(f.cfg.BufferDir, name+journalExt)
	fh, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("cannot create journal: %w", err)
	}
	fail := func(err error) (*os.File, string, error) {
		fh.Close()
		os.Remove(tmp)
		return nil, "", err
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(fmt.Errorf("cannot lock journal: %w", err))
	}
	if _, err := fh.Write(content); err != nil {
		return fail(fmt.Errorf("cannot write journal: %w", err))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("cannot name journal: %w", err))
	}
	return fh, path, nil
}

// Journal returns the Forwarder's journal of the requests in flight.
func (f *Forwarder) Journal() *Journal { return f.journal }

// Begin notes the request of entry as in flight; line is its record
// without a response, one NDJSON line without the newline.
func (j *Journal) Begin(entry uint64, line []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.early[entry]; ok {
		delete(j.early, entry)
		return
	}
	if j.fh == nil || j.off {
		return
	}
	if n := int64(len(line)) + 24; j.live+n > j.f.cfg.MaxBufferBytes/journalShare {
		// Not written: the journal, and a recovery's memory, stay bounded
		// however many calls are in flight or however large one is. The
		// call is recorded when its exchange ends, as without a journal;
		// only a crash before that loses it, and that is counted.
		j.skip[entry] = struct{}{}
		j.f.metrics.Forward(metrics.ForwardUnjournaled, 1)
		j.skipped++
		if now := time.Now(); now.Sub(j.warnedAt) >= journalWarnEvery {
			j.f.log.Warn("calls in flight past the journal's bound not journaled: a crash while they are in flight would lose them",
				"journal", j.path, "calls", j.skipped, "in_flight_bytes", j.live, "bound_bytes", j.f.cfg.MaxBufferBytes/journalShare)
			j.skipped, j.warnedAt = 0, now
		}
		return
	}
	j.buf = append(strconv.AppendUint(append(j.buf[:0], 'B', ' '), entry, 10), ' ')
	j.buf = append(append(j.buf, line...), '\n')
	j.writeLocked()
	// Kept to rewrite the journal: a busy relay may never be without a
	// call in flight.
	j.open[entry] = bytes.Clone(j.buf)
	j.live += int64(len(j.buf))
}

// End notes that the exchange of entry ended: its record is in a segment,
// or is not to be written.
func (j *Journal) End(entry uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fh == nil || j.off {
		return // nothing begins any more
	}
	if _, ok := j.skip[entry]; ok {
		delete(j.skip, entry)
		return
	}
	b, ok := j.open[entry]
	if !ok {
		j.early[entry] = struct{}{}
		return
	}
	delete(j.open, entry)
	j.live -= int64(len(b))
	// Emptied whenever nothing is in flight, not only past
	// journalCompactBytes: the lines of ended calls would otherwise stay on
	// disk for as long as a quiet relay lives, raw with --redact=false
	// (prox17), after their records left the buffer.
	if (len(j.open) == 0 || j.size >= journalCompactBytes && j.size >= 2*j.live) && j.compactLocked() {
		return
	}
	j.buf = append(strconv.AppendUint(append(j.buf[:0], 'E', ' '), entry, 10), '\n')
	j.writeLocked()
}

// compactLocked drops the lines of the entries that ended: it empties the
// file but for its header when nothing is in flight, else writes the entries in flight to a
// new journal and deletes the old one. A crash between the two leaves both,
// and the calls in flight are recorded twice, as plain duplicates.
func (j *Journal) compactLocked() bool {
	if len(j.open) == 0 {
		if err := j.fh.Truncate(int64(j.head)); err != nil {
			return false
		}
		j.size = int64(j.head)
		return true
	}
	// In the order they began, as the recovery buffers them.
	all := journalHeader(j.f.cfg.Source)
	for _, e := range slices.Sorted(maps.Keys(j.open)) {
		all = append(all, j.open[e]...)
	}
	fh, path, err := j.f.createJournal(all)
	if err != nil {
		j.f.log.Warn("cannot rewrite the journal of calls in flight", "err", err)
		return false
	}
	os.Remove(j.path)
	j.fh.Close()
	j.fh, j.path, j.size = fh, path, int64(len(all))
	return true
}

func (j *Journal) writeLocked() {
	n, err := j.fh.Write(j.buf)
	j.size += int64(n)
	if err != nil {
		// The records are still written when their exchanges end; only a
		// crash would lose the calls that begin from now on, as before the
		// journal. The file stays open, and locked: closed, it would look
		// like the journal of a dead relay, and the next scan (this
		// relay's own sender's too) would record the calls still in
		// flight without a response while they are answered. A crash
		// leaves its lines for the next relay: the calls in flight at the
		// failure, and those that ended since without their E line, as
		// duplicates of their records.
		j.f.log.Error("cannot write the journal of calls in flight; it is off", "journal", j.path, "err", err)
		j.off = true
	}
}

// close deletes the journal when nothing is in flight, else leaves it for
// the next start, and releases it. It returns the path of the journal it
// left, with the number of calls in flight in it, or the error that kept
// it from deleting it.
func (j *Journal) close() (left string, inFlight int, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fh == nil {
		return "", 0, nil
	}
	defer func() {
		j.fh.Close()
		j.fh = nil
	}()
	// Once off, what is in flight is not known: a graceful stop recorded
	// its calls in flight before the journal closes.
	if len(j.open) == 0 || j.off {
		if err := os.Remove(j.path); err != nil {
			return j.path, 0, fmt.Errorf("cannot remove the journal of calls in flight: %w", err)
		}
		return "", 0, nil
	}
	return j.path, len(j.open), nil
}

// recoverJournals buffers the records of the requests left in flight in
// the journals of processes that are gone (their lock is free), without a
// response, and deletes the journals. A record buffered just before its
// process died, whose "E" line was never written, is buffered again
// without its response: the collector takes that copy, of the same call id,
// as a duplicate of the answered one.
func (f *Forwarder) recoverJournals() {
	names, _ := filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+journalExt))
	for _, p := range names {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		f.recoverJournal(p, fh)
	}
	// A journal being made holds nothing yet; one whose process died
	// before naming it is deleted once no lock holds it and it is old
	// enough not to be one another process has just created and not
	// locked yet.
	names, _ = filepath.Glob(filepath.Join(f.cfg.BufferDir, "*"+journalNewExt))
	for _, p := range names {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			// Sooner when the process its name gives is gone: a clean
			// stop within the minute left it (rev18p). Not at once: the
			// pid may be another pid namespace's (relays in containers
			// sharing the directory), whose process has just created it.
			if st, err := fh.Stat(); err == nil {
				if age := time.Since(st.ModTime()); age > time.Minute || age > journalNewDeadAge && !processAlive(p) {
					os.Remove(p)
				}
			}
		}
		fh.Close()
	}
}

// journalNewDeadAge is how old a .journal.new of a pid that is no process
// must be to be deleted: far longer than the instant between its creation
// and its lock.
const journalNewDeadAge = 5 * time.Second

// recoverJournal buffers the calls in flight of the journal p, opened as
// fh, if no live process holds it, deletes it, and closes fh.
func (f *Forwarder) recoverJournal(p string, fh *os.File) {
	defer fh.Close()
	// Our own journal is locked through another open file: skipped.
	if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // its process lives
	}
	st, err := fh.Stat()
	if err != nil {
		return
	}
	// Opened before its live process rewrote or deleted it, and locked
	// once that process let the old file go: its calls are in the new
	// journal, or ended. Only the file still at p is the journal.
	if now, err := os.Stat(p); err != nil || !os.SameFile(st, now) {
		return
	}
	// A journal is locked before it is named (createJournal): an empty
	// one unlocked is not one being made but an older release's, whose
	// relay died before its first line.
	source, lines, err := readJournal(fh)
	if err != nil {
		f.log.Error("cannot read the journal of a process that is gone", "journal", p, "err", err)
		return
	}
	if source == "" {
		source = f.cfg.Source // an older release's journal: its source is not known
	} else {
		// NAME is TIME-PID: the segments its process left open are its too.
		name := strings.TrimSuffix(filepath.Base(p), journalExt)
		f.sealOrphansOf(name[strings.LastIndexByte(name, '-')+1:], source)
	}
	if len(lines) > 0 {
		if err := f.addFrom(source, lines); err != nil {
			f.log.Error("call in flight at a crash lost", "journal", filepath.Base(p), "source", source, "err", err)
			return
		}
		f.log.Warn("calls in flight when their relay died recorded without a response", "journal", filepath.Base(p),
			"source", source, "calls", len(lines))
	}
	os.Remove(p)
}

// unfinished returns the records of the entries of a journal that began
// and never ended, in the order they began. A line that is not whole is
// skipped: the last one, without its newline, was cut by a crash in the
// middle of its write or by a full disk (an "E 1" may be the start of
// "E 12", a "B" line may end in "}" where it was cut).
func unfinished(fh *os.File) ([][]byte, error) {
	_, recs, err := readJournal(fh)
	return recs, err
}

// readJournal returns the source in the header of a journal ("" when it
// has none: an older release's) and its unfinished records.
func readJournal(fh *os.File) (string, [][]byte, error) {
	var source string
	begun := map[uint64][]byte{}
	var order []uint64
	rd := bufio.NewReaderSize(fh, 64<<10)
	for {
		l, err := rd.ReadBytes('\n')
		if err == io.EOF {
			break // l, if any, is not whole
		}
		if err != nil {
			return "", nil, err
		}
		l = l[:len(l)-1]
		if len(l) < 3 || l[1] != ' ' {
			continue
		}
		if l[0] == 'S' {
			if s, err := strconv.Unquote(string(l[2:])); err == nil {
				source = s
			}
			continue
		}
		rest := l[2:]
		idEnd := bytes.IndexByte(rest, ' ')
		if idEnd < 0 {
			idEnd = len(rest)
		}
		id, err := strconv.ParseUint(string(rest[:idEnd]), 10, 64)
		if err != nil {
			continue
		}
		switch l[0] {
		case 'B':
			if idEnd == len(rest) {
				continue
			}
			rec := rest[idEnd+1:]
			if len(rec) == 0 || rec[0] != '{' || rec[len(rec)-1] != '}' {
				continue
			}
			if _, ok := begun[id]; !ok {
				order = append(order, id)
			}
			begun[id] = rec
		case 'E':
			delete(begun, id)
		}
	}
	var out [][]byte
	for _, id := range order {
		if rec := begun[id]; rec != nil {
			out = append(out, rec)
		}
	}
	return source, out, nil
}

// processAlive reports whether the process whose pid ends the name of the
// journal file p (TIME-PID.journal.new) may be alive: true unless the pid
// is sure to be no process. A reused pid keeps the file until the minute
// is over, as before.
func processAlive(p string) bool {
	name := strings.TrimSuffix(filepath.Base(p), journalNewExt)
	pid, err := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	if err != nil || pid <= 0 {
		return true
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
