package forward

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// journalExt names the journal of one process in the buffer directory.
const journalExt = ".journal"

// journalCompactBytes is the size past which a journal with nothing in
// flight is emptied.
const journalCompactBytes = 1 << 20

// Journal is the list of the requests in flight of one process, kept
// beside the segments: a line "B <entry> <record>" when a request goes
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
	path  string
	size  int64
	open  map[uint64]struct{} // begun, not ended
	early map[uint64]struct{} // ended before their Begin
	buf   []byte
}

// openJournal creates and locks this process's journal.
func (f *Forwarder) openJournal() (*Journal, error) {
	name := fmt.Sprintf("%020d-%d%s", time.Now().UnixNano(), os.Getpid(), journalExt)
	path := filepath.Join(f.cfg.BufferDir, name)
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create journal: %w", err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fh.Close()
		os.Remove(path)
		return nil, fmt.Errorf("cannot lock journal: %w", err)
	}
	return &Journal{f: f, fh: fh, path: path, open: make(map[uint64]struct{}), early: make(map[uint64]struct{})}, nil
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
	if j.fh == nil {
		return
	}
	j.buf = append(strconv.AppendUint(append(j.buf[:0], 'B', ' '), entry, 10), ' ')
	j.buf = append(append(j.buf, line...), '\n')
	j.writeLocked()
	j.open[entry] = struct{}{}
}

// End notes that the exchange of entry ended: its record is in a segment,
// or is not to be written.
func (j *Journal) End(entry uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.open[entry]; !ok {
		j.early[entry] = struct{}{}
		return
	}
	delete(j.open, entry)
	if j.fh == nil {
		return
	}
	if len(j.open) == 0 && len(j.early) == 0 && j.size >= journalCompactBytes {
		// Nothing in flight: no line of the file is needed any more.
		if err := j.fh.Truncate(0); err == nil {
			j.size = 0
			return
		}
	}
	j.buf = append(strconv.AppendUint(append(j.buf[:0], 'E', ' '), entry, 10), '\n')
	j.writeLocked()
}

func (j *Journal) writeLocked() {
	n, err := j.fh.Write(j.buf)
	j.size += int64(n)
	if err != nil {
		// The records are still written when their exchanges end; only a
		// crash would lose the calls in flight, as before the journal.
		j.f.log.Error("cannot write the journal of calls in flight; it is off", "journal", j.path, "err", err)
		j.fh.Close()
		j.fh = nil
	}
}

// close deletes the journal when nothing is in flight, else leaves it for
// the next start, and releases it.
func (j *Journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fh == nil {
		return
	}
	if len(j.open) == 0 {
		os.Remove(j.path)
	}
	j.fh.Close()
	j.fh = nil
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
		if f.journal != nil && p == f.journal.path {
			continue
		}
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		if syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			fh.Close()
			continue // its process lives
		}
		lines, err := unfinished(fh)
		if err != nil {
			f.log.Error("cannot read the journal of a process that is gone", "journal", p, "err", err)
			fh.Close()
			continue
		}
		ok := true
		for _, l := range lines {
			if err := f.Add(append(l, '\n')); err != nil {
				f.log.Error("call in flight at a crash lost", "journal", filepath.Base(p), "err", err)
				ok = false
				break
			}
		}
		if ok {
			if len(lines) > 0 {
				f.log.Warn("calls in flight when their relay died recorded without a response", "journal", filepath.Base(p), "calls", len(lines))
			}
			os.Remove(p)
		}
		fh.Close()
	}
}

// unfinished returns the records of the entries of a journal that began
// and never ended, in the order they began. A line that is not whole is
// skipped.
func unfinished(fh *os.File) ([][]byte, error) {
	begun := map[uint64][]byte{}
	var order []uint64
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		l := sc.Bytes()
		if len(l) < 3 || l[1] != ' ' {
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
			rec := bytes.Clone(rest[idEnd+1:])
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
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out [][]byte
	for _, id := range order {
		if rec := begun[id]; rec != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}
