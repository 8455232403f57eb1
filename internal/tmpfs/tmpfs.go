// Package tmpfs mounts a small tmpfs for the tests that need a real
// full disk (ENOSPC from the kernel, not from a fake writer).
package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of the given size ("2m", "24m") on a new
// directory of t's temporary directory, unmounted when t ends, and
// returns the directory. It skips t, saying why, where mount is refused
// (not root, or no mount in a container).
func Mount(t testing.TB, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "full")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED: a real full disk needs a tmpfs, and mount -t tmpfs failed (run as root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// FillInodes creates empty files in dir until the file system has no
// inode left (ENOSPC), and returns their paths: removing one frees an
// inode.
func FillInodes(t testing.TB, dir string) []string {
	t.Helper()
	var ballast []string
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("ballast%d", i))
		f, err := os.Create(p)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return ballast
		}
		f.Close()
		ballast = append(ballast, p)
	}
}
