package pipeline

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

// The counters that go on across restarts (Config.Counters) are saved in a
// journal beside the state file (cnt50), not in it: the state file is
// rewritten whole at each save (once a second while counts wait), and at
// the caps (100 servers and "other", 64 tools each) the counters' values
// are 2.6 MB of it. The journal begins with every value (a snapshot) and
// then gets, at each save, only the servers' findings and tools with a
// change since the save before (a delta, Counters.SaveCounts), appended
// and synced; once the deltas outgrow the snapshot (and compactAfter) the
// next save writes a new journal with a snapshot, to the other of two
// files (temporary file, sync, rename, directory sync). The state file
// names the journal, its id and the sequence number of the last record
// whose values go with its marks (countsRef), and is written after that
// record is synced: a start takes the journal's records up to that number
// and none after (a save whose state file a crash kept from being
// written), so the counts it begins at always go with the marks the replay
// skips by. The journal the state file names is never written over: a
// new snapshot goes to the other file, which the state file names only
// once it is written.
//
// A record is its payload's length (4 bytes, little-endian), the payload's
// CRC-32C (4 bytes) and the payload: the journal's id (8 bytes), the
// record's sequence number (8 bytes) and the values (JSON, Counters). A
// record cut short or damaged ends the journal where it begins (a save a
// crash cut off).

// countsRef is what the state file keeps of the counters' journal.
type countsRef struct {
	// File is the journal's name, in the state file's directory.
	File string `json:"file"`
	// ID tells the journal from another of the same name (written for
	// another store's state file, or left by an earlier run).
	ID string `json:"id"`
	// Seq is the sequence number of the journal's last record whose
	// values go with the file's marks.
	Seq uint64 `json:"seq"`
}

// countLogMagic begins a journal of the counters.
const countLogMagic = "mcpaudit-counts1\n"

// compactAfter is the least a journal's deltas grow to before the next
// save writes a new snapshot: a journal of a few servers stays up to about
// this size (read at start), one larger grows to twice its snapshot.
var compactAfter int64 = 256 << 10 // a variable for tests

// maxCountRecord bounds a record's length: a larger one is damage.
const maxCountRecord = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// countLog is the counters' journal this run writes to.
type countLog struct {
	dir  string
	file string   // its name in dir
	f    *os.File // open to append
	id   uint64
	seq  uint64
	// snapshot and deltas are the bytes of its first record and of those
	// after it.
	snapshot, deltas int64
	// broken is set when an append failed: what follows the last good
	// record is unknown, so the next save writes a new journal.
	broken bool
}

// CountLogNames returns the names of the two files of the counters'
// journal of the state file at path, in its directory: partitions.json's
// are partitions.counts.a and partitions.counts.b. They go with the state
// file: moved (or set aside) with it, so that a state file put back
// finds its journal.
func CountLogNames(path string) []string {
	n := countLogNames(path)
	return n[:]
}

func countLogNames(path string) [2]string {
	base := strings.TrimSuffix(filepath.Base(path), ".json")
	return [2]string{base + ".counts.a", base + ".counts.b"}
}

// ref returns what the state file keeps of the journal with its records
// up to the last one appended.
func (l *countLog) ref() *countsRef {
	return &countsRef{File: l.file, ID: strconv.FormatUint(l.id, 16), Seq: l.seq}
}

// close closes the journal's file.
func (l *countLog) close() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// appendRecord appends to b the record of seq in the journal id with the
// values v.
func appendRecord(b []byte, id, seq uint64, v []byte) []byte {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(16+len(v)))
	binary.LittleEndian.PutUint64(h[8:], id)
	binary.LittleEndian.PutUint64(h[16:], seq)
	crc := crc32.Update(crc32.Checksum(h[8:], crcTable), crcTable, v)
	binary.LittleEndian.PutUint32(h[4:], crc)
	return append(append(b, h[:]...), v...)
}

// writeCountLog writes a new journal named file in dir, other than the
// one the state file names, whose first record, seq, holds every value
// (v), durably (datadir.WriteFileSynced). It
// returns the journal open to append.
func writeCountLog(dir, file string, seq uint64, v []byte) (*countLog, error) {
	id := rand.Uint64()
	b := appendRecord(append(make([]byte, 0, len(countLogMagic)+24+len(v)), countLogMagic...), id, seq, v)
	path := filepath.Join(dir, file)
	// The state file that names it must not find it gone after a power
	// loss: the directory is synced.
	if err := writeFileSynced(path, b, datadir.FileMode); err != nil {
		return nil, fmt.Errorf("cannot write the counters' journal: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open the counters' journal: %w", err)
	}
	return &countLog{dir: dir, file: file, f: f, id: id, seq: seq, snapshot: int64(len(b))}, nil
}

// append appends the record of the next sequence number with the values v
// (a delta) and syncs it. On an error the journal is broken: the next save
// writes a new one.
func (l *countLog) append(v []byte) error {
	b := appendRecord(nil, l.id, l.seq+1, v)
	if _, err := l.f.Write(b); err != nil {
		l.broken = true
		return fmt.Errorf("cannot append to the counters' journal: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		l.broken = true
		return fmt.Errorf("cannot append to the counters' journal: %w", err)
	}
	l.seq++
	l.deltas += int64(len(b))
	return nil
}

// Why readCountLog cannot give the values a state file names.
var (
	// errCountLogName is a state file that names a journal by a name
	// other than its own journals' (countLogNames): edited, or from
	// elsewhere.
	errCountLogName = errors.New("not a name of this state file's journals")
	// errCountLogShort is a journal that ends (or is damaged) before the
	// record the state file names: its values are unknown.
	errCountLogShort = errors.New("the journal ends before the record the state file names")
)

// readCountLog returns the values of the counters' journal ref names
// (from the state file at path), its records from the first up to ref.Seq,
// in order, for Counters.RestoreCounts (scanCountLog). An error when the
// journal cannot be read, is another (its id), or ends before ref.Seq.
func readCountLog(path string, ref *countsRef) ([]json.RawMessage, error) {
	names := countLogNames(path)
	if ref.File != names[0] && ref.File != names[1] {
		return nil, fmt.Errorf("cannot read the counters' journal %q: %w", ref.File, errCountLogName)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), ref.File))
	if err != nil {
		return nil, fmt.Errorf("cannot read the counters' journal: %w", err)
	}
	out, _, err := scanCountLog(b, ref)
	return out, err
}

// scanCountLog returns the values of the journal b up to the record
// ref.Seq names, and the length of b that ends with that record. Records
// after ref.Seq (saved before a crash kept the state file from being
// written) are passed over, and so is a record cut short or damaged
// (CRC-32C) after ref.Seq: the end of a save a crash cut off. An error
// when b is not a journal, is another (its id), or ends before ref.Seq.
func scanCountLog(b []byte, ref *countsRef) ([]json.RawMessage, int, error) {
	id, err := strconv.ParseUint(ref.ID, 16, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("cannot read the counters' journal %s: its id %q: %w", ref.File, ref.ID, err)
	}
	if !bytes.HasPrefix(b, []byte(countLogMagic)) {
		return nil, 0, fmt.Errorf("cannot read the counters' journal %s: not a journal of the counters", ref.File)
	}
	var out []json.RawMessage
	var seq uint64
	end := len(countLogMagic)
	rest := b[end:]
	for len(rest) >= 8 {
		n := binary.LittleEndian.Uint32(rest[0:])
		if n < 16 || n > maxCountRecord || int64(n) > int64(len(rest)-8) {
			break
		}
		payload := rest[8 : 8+n]
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(rest[4:]) {
			break
		}
		if got := binary.LittleEndian.Uint64(payload[0:]); got != id {
			return nil, 0, fmt.Errorf("cannot read the counters' journal %s: its id is %x, the state file's %s (a journal of another state file, or of an earlier run)", ref.File, got, ref.ID)
		}
		s := binary.LittleEndian.Uint64(payload[8:])
		if len(out) > 0 && s != seq+1 {
			break // not the next: damage
		}
		if s > ref.Seq {
			break
		}
		seq = s
		out = append(out, json.RawMessage(payload[16:]))
		rest = rest[8+n:]
		end += 8 + int(n)
	}
	if len(out) == 0 || seq != ref.Seq {
		return nil, 0, fmt.Errorf("cannot read the counters' journal %s: %w (record %d of %d read)", ref.File, errCountLogShort, seq, ref.Seq)
	}
	return out, end, nil
}
