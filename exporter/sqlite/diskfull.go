package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// roomFloor is the least free space that makes a disk the store found
// full ready again: SQLite's log between two checkpoints (1000 pages of
// 4 KiB) twice over, whatever the size of the write that failed.
const roomFloor = 8 << 20

// fullWrite is the last write the store's disk had no room for, kept
// until a write as large succeeds or the disk has room for it again
// (Ready).
type fullWrite struct {
	at time.Time
	// bytes is the largest payload (encoded calls) that failed for want
	// of space since the disk was first found full; 0 for writes that
	// are no calls (results, retention).
	bytes int64
	err   error
}

// want is the free space that makes the disk ready again.
func (f *fullWrite) want() int64 { return max(2*f.bytes, roomFloor) }

// noteWrite keeps what a write of payload bytes met: a failure for want
// of space marks the disk full (Ready fails); a success as large as the
// write that failed clears it. Smaller writes that succeed meanwhile (a
// commit of a few calls can still fit a disk that refused a larger one)
// do not: readiness would go back and forth with the sizes of requests.
func (s *Store) noteWrite(err error, bytes int64) {
	if err == nil {
		if f := s.fullAt.Load(); f != nil && bytes >= f.bytes {
			s.fullAt.CompareAndSwap(f, nil)
		}
		return
	}
	if !errors.Is(err, syscall.ENOSPC) {
		return
	}
	for {
		old := s.fullAt.Load()
		f := &fullWrite{at: time.Now(), bytes: bytes, err: err}
		if old != nil {
			f.bytes = max(f.bytes, old.bytes)
		}
		if s.fullAt.CompareAndSwap(old, f) {
			return
		}
	}
}

// fullReason is why the store is not ready for a full disk, nil when it
// was not found full or has room again: then it is cleared.
func (s *Store) fullReason() error {
	f := s.fullAt.Load()
	if f == nil {
		return nil
	}
	free, known := freeBytes(filepath.Dir(s.path))
	if known && free >= f.want() {
		s.fullAt.CompareAndSwap(f, nil)
		return nil
	}
	return &notReadyFull{file: filepath.Base(s.path), w: f, free: free, known: known}
}

// notReadyFull is Ready's error while the disk is full. It names the
// file's base name only, as the answer to a refused sender does: /readyz
// answers anyone who can reach it. It reads as syscall.ENOSPC and
// audit.ErrUnavailable (Unwrap).
type notReadyFull struct {
	file  string
	w     *fullWrite
	free  int64
	known bool
}

func (e *notReadyFull) Error() string {
	free := "free space unknown"
	if e.known {
		free = fmt.Sprintf("%d bytes free", e.free)
	}
	return fmt.Sprintf("store: disk full (ENOSPC) writing %s at %s: calls are refused (503) while it has no room; ready again once a write as large succeeds or the disk has %d bytes free (%s): free space on it, or move serve.data_dir to a larger one",
		e.file, e.w.at.UTC().Format(time.RFC3339), e.w.want(), free)
}

func (e *notReadyFull) Unwrap() error { return e.w.err }

// noteCalls is noteWrite for a write of the calls rows. Their size is
// summed only when it can matter: the write failed, or the disk was found
// full before; a commit on a disk with room pays one atomic load.
func (s *Store) noteCalls(err error, rows []callRow) {
	if err == nil && s.fullAt.Load() == nil {
		return
	}
	s.noteWrite(err, payload(rows))
}

// payload is the size of the encoded calls of rows: what a write of them
// needs at least.
func payload(rows []callRow) int64 {
	var n int64
	for i := range rows {
		n += int64(len(rows[i].rec))
	}
	return n
}
