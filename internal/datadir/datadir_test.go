package datadir

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/tmpfs"
)

func TestOpen_PrivateWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data")
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := CreatePrivate(filepath.Join(dir, "store.db")); err != nil {
		t.Fatal(err)
	}
	if err := Check(dir); err != nil {
		t.Fatal(err)
	}
	// An existing directory of the usual mode is tightened too.
	loose := filepath.Join(t.TempDir(), "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	d2, err := Open(loose)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := Check(loose); err != nil {
		t.Fatal(err)
	}
	// Check names what is readable by others.
	if err := os.WriteFile(filepath.Join(loose, "leak"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(loose); err == nil || !strings.Contains(err.Error(), "leak (-rw-r--r--)") {
		t.Fatalf("Check = %v, want the leaking file named", err)
	}
}

// TestOpen_SecondProcessRefused takes the lock in this process and tries it
// from a child process, which must be refused with this process's pid.
func TestOpen_SecondProcessRefused(t *testing.T) {
	if os.Getenv("DATADIR_CHILD") != "" {
		_, err := Open(os.Getenv("DATADIR_CHILD"))
		var le *LockedError
		if errors.As(err, &le) && errors.Is(err, ErrLocked) {
			os.Stdout.WriteString("refused " + strconv.Itoa(le.PID) + ": " + err.Error())
			os.Exit(3)
		}
		os.Stdout.WriteString("not refused: " + os.Args[0])
		os.Exit(0)
	}
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	child := func() (string, int) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestOpen_SecondProcessRefused$")
		cmd.Env = append(os.Environ(), "DATADIR_CHILD="+dir)
		out, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := child()
	want := "refused " + strconv.Itoa(os.Getpid()) + ": data dir " + dir + " is in use by pid " + strconv.Itoa(os.Getpid())
	if code != 3 || !strings.HasPrefix(out, want) {
		t.Fatalf("second process: exit %d, %q; want exit 3 and %q", code, out, want)
	}
	// Released on Close: the next process takes it.
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := child(); code != 0 {
		t.Fatalf("after Close, second process: exit %d, %q; want it to get the lock", code, out)
	}
}

// TestOpen_ReleasedHeldByChild: a data dir this process closed and opens
// again while a child it started holds a copy of the lock's descriptor (a
// fork between the Close and the Open, whose exec has not closed it yet:
// here a child given the descriptor on purpose, which holds it for
// 300 ms). The Open waits for it instead of refusing this process's own
// pid; a lock of another process is still refused at once
// (TestOpen_SecondProcessRefused). Failed in CI before the wait.
func TestOpen_ReleasedHeldByChild(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command:", err)
	}
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "0.3")
	cmd.ExtraFiles = []*os.File{d.lock} // the child's fd 3: the lock's description
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d, err = Open(dir)
	if err != nil {
		t.Fatalf("reopened while a child holds the released lock: %v", err)
	}
	d.Close()
}

// TestOpen_CrashReleases kills a holder with SIGKILL: the lock goes with it.
func TestOpen_CrashReleases(t *testing.T) {
	if dir := os.Getenv("DATADIR_HOLD"); dir != "" {
		if _, err := Open(dir); err != nil {
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		// Not select{}: with nothing else to wake it, the runtime took that
		// for a deadlock and ended the holder, releasing the lock before
		// the parent tried it (the test failed about half the time).
		time.Sleep(time.Hour)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOpen_CrashReleases$")
	cmd.Env = append(os.Environ(), "DATADIR_HOLD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("holder: %q, %v", buf, err)
	}
	_, err = Open(dir)
	var le *LockedError
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid {
		t.Fatalf("while held: %v, want LockedError naming pid %d", err, cmd.Process.Pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	d, err := Open(dir)
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	d.Close()
}

// TestSyncDir: a directory syncs; a missing one is an error that names it.
func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "gone")
	if err := SyncDir(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("SyncDir of a missing directory: %v, want an error naming it", err)
	}
}

// TestCreatePrivate_ExistingNotWritable: a store file that exists but
// cannot be opened for writing is named as existing, not "cannot create"
// (adv22 I: a read-only or immutable mcpaudit.db). Run as root, which
// opens a 0400 file, the case of a directory in its place stands for it;
// otherwise both are checked.
func TestCreatePrivate_ExistingNotWritable(t *testing.T) {
	dir := t.TempDir()
	f := func(path string) {
		t.Helper()
		err := CreatePrivate(path)
		if err == nil || !strings.Contains(err.Error(), "cannot open "+path+" for writing, which exists") || strings.Contains(err.Error(), "cannot create") {
			t.Errorf("CreatePrivate(%s) = %v, want it named as existing", path, err)
		}
	}
	asDir := filepath.Join(dir, "dir.db")
	if err := os.Mkdir(asDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f(asDir)
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro.db")
		if err := os.WriteFile(ro, nil, 0o400); err != nil {
			t.Fatal(err)
		}
		f(ro)
	}
	// A missing file in a missing directory is still "cannot create".
	if err := CreatePrivate(filepath.Join(dir, "none", "x.db")); err == nil || !strings.Contains(err.Error(), "cannot create") {
		t.Errorf("missing directory: %v, want cannot create", err)
	}
}

// wantOnly fails t unless dir holds path alone, with content want.
func wantOnly(t *testing.T, path string, want []byte) {
	t.Helper()
	if names, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*")); len(names) != 1 || names[0] != path {
		t.Errorf("the directory holds %q, want %s alone (no temporary file left)", names, path)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s holds %q, want %q (its old content)", path, got, want)
	}
}

func TestWriteFileSynced_Replaces(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "state[1].json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileSynced(path, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, path, []byte("new"))
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o640 {
		t.Errorf("mode %v (%v), want 0640 whatever the umask", info.Mode().Perm(), err)
	}
}

// TestTempGlob: the pattern matches the temporary files of path, whose
// name has glob meta characters, and not path itself nor another file's.
func TestTempGlob(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a[1]*.json")
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	other, err := os.CreateTemp(dir, tempPattern(filepath.Join(dir, "b.json")))
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	for _, name := range []string{path, path + TempSuffix, filepath.Join(dir, ".a[1]*.json")} {
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := filepath.Glob(TempGlob(path))
	if err != nil || len(got) != 1 || got[0] != f.Name() {
		t.Fatalf("Glob(TempGlob) = %q, %v; want [%s]", got, err, f.Name())
	}
}

// TestWriteFileSynced_RenameFails: a rename refused (path is a directory)
// removes the temporary file.
func TestWriteFileSynced_RenameFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "in"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileSynced(path, []byte("new"), FileMode); err == nil {
		t.Fatal("WriteFileSynced over a directory succeeded")
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("the directory holds %q, want state.json alone", names)
	}
}

// TestWriteFileSynced_ReadOnly: on a file system mounted read-only (a
// real one: root writes even in a directory of mode 0500) the write fails,
// the old file is left as it was and nothing else is there.
func TestWriteFileSynced_ReadOnly(t *testing.T) {
	dir := tmpfs.Mount(t, "1m")
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	err := WriteFileSynced(path, []byte("new"), FileMode)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("WriteFileSynced on a read-only file system = %v, want EROFS", err)
	}
	wantOnly(t, path, []byte("old"))
}

// TestWriteFileSynced_Full: on a full file system (a real tmpfs) the
// write fails with ENOSPC, the old file is left as it was, and the
// temporary file is gone with the space it took.
func TestWriteFileSynced_Full(t *testing.T) {
	dir := tmpfs.Mount(t, "256k")
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var fs0 syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs0); err != nil {
		t.Fatal(err)
	}
	err := WriteFileSynced(path, make([]byte, 1<<20), FileMode)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("WriteFileSynced of 1 MiB on a 256 KiB file system = %v, want ENOSPC", err)
	}
	wantOnly(t, path, []byte("old"))
	var fs1 syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs1); err != nil {
		t.Fatal(err)
	}
	if fs1.Bfree != fs0.Bfree {
		t.Errorf("%d blocks free after the failed write, %d before: the space of the temporary file was not given back", fs1.Bfree, fs0.Bfree)
	}
	// With the space there, the same call replaces it.
	if err := WriteFileSynced(path, []byte("new"), FileMode); err != nil {
		t.Fatal(err)
	}
	wantOnly(t, path, []byte("new"))
}
