package capture

import (
	"fmt"
	"io"
	"os"
)

// spoolMemory is how much of a document the spool keeps in memory before
// it moves to a temporary file.
var spoolMemory = 16 << 20

// spool keeps what was read of an input that cannot be read at offsets
// (standard input, gzip), from the start of the document being read, so
// that its blocks can be read again: in memory, then past spoolMemory in a
// temporary file.
type spool struct {
	// base is the stream offset of the first byte kept.
	base int64
	mem  []byte
	file *os.File
	// size is the stream offset after the last byte written.
	size int64
	err  error
}

func newSpool() *spool { return &spool{} }

// Write keeps p.
func (s *spool) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.file == nil && len(s.mem)+len(p) > spoolMemory {
		f, err := os.CreateTemp("", "mcpaudit-spool-*")
		if err != nil {
			s.err = fmt.Errorf("cannot spool the input: %w", err)
			return 0, s.err
		}
		// Unlinked at once: the file goes when it is closed or the
		// process ends, however it ends.
		os.Remove(f.Name())
		if _, err := f.Write(s.mem); err != nil {
			f.Close()
			s.err = fmt.Errorf("cannot spool the input: %w", err)
			return 0, s.err
		}
		s.file, s.mem = f, nil
	}
	if s.file != nil {
		if _, err := s.file.Write(p); err != nil {
			s.err = fmt.Errorf("cannot spool the input: %w", err)
			return 0, s.err
		}
	} else {
		s.mem = append(s.mem, p...)
	}
	s.size += int64(len(p))
	return len(p), nil
}

// ReadAt reads what was kept at stream offset off.
func (s *spool) ReadAt(p []byte, off int64) (int, error) {
	if off < s.base {
		return 0, fmt.Errorf("spool: offset %d was discarded", off)
	}
	if off >= s.size {
		return 0, io.EOF
	}
	var n int
	if s.file != nil {
		var err error
		n, err = s.file.ReadAt(p[:min(int64(len(p)), s.size-off)], off-s.base)
		if err != nil && err != io.EOF {
			return n, err
		}
	} else {
		n = copy(p, s.mem[off-s.base:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// discard drops what comes before stream offset off: a document that was
// read. A temporary file is given up once what it holds after off fits in
// memory.
func (s *spool) discard(off int64) {
	if off <= s.base || s.err != nil {
		return
	}
	off = min(off, s.size)
	if s.file == nil {
		s.mem = append(s.mem[:0], s.mem[off-s.base:]...)
		s.base = off
		return
	}
	if rest := s.size - off; rest <= int64(spoolMemory) {
		mem := make([]byte, rest)
		if _, err := s.file.ReadAt(mem, off-s.base); err != nil && err != io.EOF {
			s.err = fmt.Errorf("cannot read the spool: %w", err)
			return
		}
		s.file.Close()
		s.file, s.mem, s.base = nil, mem, off
	}
}

// Close removes the temporary file, if any.
func (s *spool) Close() error {
	if s.file != nil {
		return s.file.Close()
	}
	return nil
}
