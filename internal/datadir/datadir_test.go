package datadir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
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

// TestOpen_CrashReleases kills a holder with SIGKILL: the lock goes with it.
func TestOpen_CrashReleases(t *testing.T) {
	if dir := os.Getenv("DATADIR_HOLD"); dir != "" {
		if _, err := Open(dir); err != nil {
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		select {}
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
