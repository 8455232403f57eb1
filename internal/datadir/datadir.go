package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Modes of the data directory and of every file in it: readable by their
// owner only. The audit records hold tool arguments and results.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

// LockName is the lock file inside the data directory.
const LockName = "LOCK"

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("data dir in use")

// LockedError says which process holds a data directory.
type LockedError struct {
	Dir string
	// PID is the holder's process id as it wrote it; 0 when unreadable.
	PID int
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data dir %s is in use by %s (lock file %s): stop it, or give this process another data dir",
		e.Dir, holder, filepath.Join(e.Dir, LockName))
}

// Unwrap lets errors.Is match ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// Dir is a data directory held by this process.
type Dir struct {
	path string
	lock *os.File
}

// Open creates dir when missing, makes it private (0700) and takes its lock,
// writing this process's id into the lock file. When another process holds
// the lock it returns a *LockedError naming that process. The lock is an
// flock: the kernel releases it when the process dies, so a crash never
// leaves the directory locked.
func Open(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return nil, fmt.Errorf("cannot create data dir: %w", err)
	}
	if err := os.Chmod(dir, DirMode); err != nil {
		return nil, fmt.Errorf("cannot make data dir %s private: %w", dir, err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("cannot open lock file: %w", err)
	}
	if err := lock(f); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Dir: dir, PID: readPID(f)}
		}
		return nil, fmt.Errorf("cannot lock data dir %s: %w", dir, err)
	}
	// Held: record who holds it, for the next one's error message.
	if err := writePID(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := Private(path); err != nil {
		f.Close()
		return nil, err
	}
	return &Dir{path: dir, lock: f}, nil
}

// ownRelease bounds how long Open waits for a lock this process released
// and a child of it still holds (see lock).
const ownRelease = 2 * time.Second

// lock takes f's flock without waiting for another process. A lock the
// file names this process as holder was released by this process (its
// Close) and is held on by a child forked in between: a fork copies the
// descriptor, which shares the lock, and the child's exec closes it
// (close-on-exec) a moment later. A process that starts children while
// it reopens its data dir (serve restarted in one process, the tests of
// cmd/mcpaudit, run beside tests that start children) would otherwise
// see its own pid refused (CI, 2026-12-08: TestServe_Restart). That lock
// is waited for, up to ownRelease; another process's is refused at once.
func lock(f *os.File) error {
	deadline := time.Now().Add(ownRelease)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || readPID(f) != os.Getpid() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Path returns the directory.
func (d *Dir) Path() string { return d.path }

// Close releases the lock. The lock file stays; its pid is stale.
func (d *Dir) Close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	err := d.lock.Close() // closing the descriptor releases the flock
	d.lock = nil
	return err
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("cannot write lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fmt.Errorf("cannot write lock file: %w", err)
	}
	return nil
}

// Private sets path to FileMode (a directory to DirMode), whatever the
// umask gave it at creation.
func Private(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("cannot make %s private: %w", path, err)
	}
	mode := FileMode
	if info.IsDir() {
		mode = DirMode
	}
	if info.Mode().Perm() == mode {
		return nil
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("cannot make %s private: %w", path, err)
	}
	return nil
}

// CreatePrivate creates the file path (or opens it when it exists) with
// FileMode, whatever the umask, and closes it: a store that lets a library
// create its files (SQLite) creates them first through this.
func CreatePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		if _, serr := os.Lstat(path); serr == nil {
			// It is there: "cannot create" sent the operator looking for
			// a missing file (adv22, a read-only or immutable store).
			return fmt.Errorf("cannot open %s for writing, which exists (check its owner, mode and immutable attribute): %w", path, err)
		}
		return fmt.Errorf("cannot create %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot create %s: %w", path, err)
	}
	return Private(path)
}

// SyncDir syncs the directory dir, so that the names created, renamed or
// removed in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot sync directory %s: %w", dir, err)
	}
	return nil
}

// Check walks dir and returns an error naming every file or directory
// whose permissions give anything to group or others.
func Check(dir string) error {
	var bad []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			bad = append(bad, fmt.Sprintf("%s (%v)", p, info.Mode().Perm()))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cannot check %s: %w", dir, err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("readable by group or others: %s", strings.Join(bad, ", "))
	}
	return nil
}

// TempSuffix ends the name of every temporary file WriteFileSynced and
// CopyFileSynced write: a start that cleans up after a crash removes the
// names TempGlob matches.
const TempSuffix = ".tmp"

// ErrDirNotSynced is wrapped by the error of WriteFileSynced and
// CopyFileSynced when the new file took its name but the directory could
// not be synced: every process (and the next start) reads the new
// content; only a power loss could bring the old one back.
var ErrDirNotSynced = errors.New("the directory could not be synced")

// WriteFileSynced replaces the file at path with data, durably: data goes
// to a new temporary file of a unique name in path's directory, which is
// synced, given mode perm (exactly, whatever the umask), renamed to path,
// and the directory synced. On a failure before the rename the temporary
// file is removed and path keeps its old content (or stays absent). A
// failure of the last directory sync wraps ErrDirNotSynced: path has the
// new content. Writers of one path must not run concurrently.
func WriteFileSynced(path string, data []byte, perm fs.FileMode) error {
	return CopyFileSynced(path, bytes.NewReader(data), perm)
}

// CopyFileSynced is WriteFileSynced with the content read from r to its
// end, for content too large to hold in memory (a store file).
func CopyFileSynced(path string, r io.Reader, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("%s is in place, but %w: %w", path, ErrDirNotSynced, err)
	}
	return nil
}

// tempPattern is the os.CreateTemp pattern of path's temporary files:
// hidden, named after path, ending in TempSuffix.
func tempPattern(path string) string {
	return "." + filepath.Base(path) + ".*" + TempSuffix
}

// TempGlob returns the filepath.Glob pattern that matches the temporary
// files WriteFileSynced and CopyFileSynced write for path: those a process
// killed between their creation and the rename left behind.
func TempGlob(path string) string {
	return filepath.Join(filepath.Dir(path), escapeGlob("."+filepath.Base(path)+".")+"*"+escapeGlob(TempSuffix))
}

// escapeGlob escapes the meta characters of a file name for filepath.Glob.
func escapeGlob(name string) string {
	var b strings.Builder
	for _, c := range name {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
