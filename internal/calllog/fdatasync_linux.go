package calllog

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and of its metadata what reading it back
// needs (its size), but not its times: one journal commit less than fsync
// when an append did not allocate.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
