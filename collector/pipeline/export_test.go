package pipeline

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"time"
)

// KnownFindings returns how many finding ids the gate keeps to recognize
// findings stored before a restart.
func KnownFindings(p *Pipeline) int { return int(p.gate.knownLen.Load()) }

// SetMaxSeedCalls sets the bound on the calls of freed partitions the
// replay holds, and returns a func that puts it back.
func SetMaxSeedCalls(n int) func() {
	old := maxSeedCalls
	maxSeedCalls = n
	return func() { maxSeedCalls = old }
}

// SetTicks has the engine goroutine of a pipeline made with c commit and
// move its watermarks with the wall clock at each value sent on ticks, in
// place of its CommitEvery ticker: a test sends one between two steps.
func SetTicks(c *Config, ticks <-chan time.Time) { c.ticks = ticks }

// StateCurrent returns the wall time the engine last found the state file
// to hold its marks: written then, or unchanged since it was (the file is
// not rewritten for that alone within stateRefresh, so StateSaved may stay
// behind a test's clock that moved a second with nothing changed).
func StateCurrent(p *Pipeline) time.Time {
	p.floorMu.Lock()
	defer p.floorMu.Unlock()
	return p.marksCurrent
}

// SetCountsSaved sets the function called between the save of the
// counters' journal and the write of the state file, and returns a func
// that puts back none.
func SetCountsSaved(f func()) func() {
	countsSaved = f
	return func() { countsSaved = nil }
}

// CountLogOf returns what the state file at path names of the counters'
// journal: its file, and the sequence number of its last record that goes
// with the marks (empty and 0 when none).
func CountLogOf(path string) (file string, seq uint64, err error) {
	f, err := readStateFile(path)
	if err != nil || f.CountersLog == nil {
		return "", 0, err
	}
	return f.CountersLog.File, f.CountersLog.Seq, nil
}

// ReadCountLog returns the values the state file at path names in the
// counters' journal, in order (readCountLog).
func ReadCountLog(path string) ([]json.RawMessage, error) {
	f, err := readStateFile(path)
	if err != nil {
		return nil, err
	}
	return readCountLog(path, f.CountersLog)
}

func readStateFile(path string) (markFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return markFile{}, err
	}
	f, _, err := decodeMarks(b)
	return f, err
}

// CountLogRecords returns the sequence numbers of the records of the
// counters' journal at path that are whole, in order, and the byte
// offset each begins at.
func CountLogRecords(path string) (seqs []uint64, offsets []int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	off := len(countLogMagic)
	for off+8 <= len(b) {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if off+8+n > len(b) || n < 16 {
			break
		}
		seqs = append(seqs, binary.LittleEndian.Uint64(b[off+16:]))
		offsets = append(offsets, off)
		off += 8 + n
	}
	return seqs, offsets, nil
}

// SetCompactAfter sets the least the counters' journal's deltas grow to
// before a save writes a new snapshot, and returns a func that puts it
// back.
func SetCompactAfter(n int64) func() {
	old := compactAfter
	compactAfter = n
	return func() { compactAfter = old }
}
