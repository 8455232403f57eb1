package calllog

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Snapshot copies the log into dst, a directory created when missing that
// must hold no segment: the sealed segments and their indexes as files,
// and the live segment up to its last synced block, its size read under
// the log's lock, so that Open(dst) gives every call acknowledged before
// Snapshot began and cuts nothing. Appends go on meanwhile: the files are
// read outside the lock (a segment retention removes meanwhile is copied
// whole, its file held open). Every file is synced, then dst. On an error
// the files it wrote are removed.
func (l *Log) Snapshot(dst string) (err error) {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("cannot snapshot the call log: %w", err)
	}
	names, err := os.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("cannot snapshot the call log: %w", err)
	}
	for _, e := range names {
		if n := e.Name(); strings.HasSuffix(n, segExt) || strings.HasSuffix(n, idxExt) {
			return fmt.Errorf("cannot snapshot the call log into %s: it holds %s", dst, n)
		}
	}
	type part struct {
		s    *segment
		size int64    // of the segment's bytes to copy
		idx  *os.File // nil for the live segment
	}
	var parts []part
	defer func() {
		for _, p := range parts {
			p.s.release()
			if p.idx != nil {
				p.idx.Close()
			}
		}
	}()
	l.mu.RLock()
	if l.live == nil {
		l.mu.RUnlock()
		return ErrClosed
	}
	for _, s := range l.sealed {
		if s.ids != nil {
			// Opened read-only, read from its blocks: no index to copy
			// (the restored log indexes it again at its open).
			s.hold()
			parts = append(parts, part{s: s, size: s.size})
			continue
		}
		// The index is opened under the lock, as the segment is held: a
		// retention that removes both meanwhile leaves them readable.
		f, err := os.Open(idxPath(s.path))
		if err != nil {
			l.mu.RUnlock()
			return fmt.Errorf("cannot snapshot the call log: %w", err)
		}
		s.hold()
		parts = append(parts, part{s: s, size: s.size, idx: f})
	}
	if l.live.f != nil { // a read-only log's empty live segment has no file
		l.live.hold()
		parts = append(parts, part{s: l.live, size: l.live.size})
	}
	l.mu.RUnlock()

	var written []string
	defer func() {
		if err != nil {
			for _, p := range written {
				os.Remove(p)
			}
		}
	}()
	copyTo := func(name string, src io.Reader) error {
		path := filepath.Join(dst, name)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("cannot snapshot the call log: %w", err)
		}
		written = append(written, path)
		_, err = io.Copy(f, src)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("cannot snapshot the call log into %s: %w", path, err)
		}
		return nil
	}
	for _, p := range parts {
		name := filepath.Base(p.s.path)
		h, err := p.s.files.acquire(p.s)
		if err != nil {
			return fmt.Errorf("cannot snapshot the call log: %w", err)
		}
		err = copyTo(name, io.NewSectionReader(h.f, 0, p.size))
		p.s.files.release(h)
		if err != nil {
			return err
		}
		if p.idx != nil {
			if err := copyTo(filepath.Base(idxPath(p.s.path)), p.idx); err != nil {
				return err
			}
		}
	}
	if err := syncDir(dst); err != nil {
		return fmt.Errorf("cannot snapshot the call log: %w", err)
	}
	return nil
}
