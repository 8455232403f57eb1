package procstat

import (
	"os"
	"runtime"
	"testing"
)

// TestMoves checks that each figure moves with what the process does: CPU
// time after a loop, bytes written after a write, resident memory after
// touching pages.
func TestMoves(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cpu0, w0 := CPU(), Written()
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	if CPU() <= cpu0 {
		t.Errorf("CPU did not move after a loop (%d)", x)
	}
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if got := Written() - w0; got < 1<<20 {
		t.Errorf("Written moved %d bytes after a 1 MiB write", got)
	}
	r0 := Resident()
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	if got := Resident() - r0; got < 32<<20 {
		t.Errorf("Resident moved %d bytes after touching 64 MiB", got)
	}
	runtime.KeepAlive(buf)
}
