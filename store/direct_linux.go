package store

import (
	"fmt"
	"os"
	"syscall"
)

// oDirect opens a file for writes that bypass the page cache
// (blobwrite.go).
const oDirect = syscall.O_DIRECT

// oDSync makes each write of the commit log return once its data is on the
// disk, with no fdatasync after it (commitlog.go).
const oDSync = syscall.O_DSYNC

// clearDirect turns O_DIRECT off on f, so that its next writes go through
// the page cache: the last part block of a value file (blobwrite.go).
func clearDirect(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	err = rc.Control(func(fd uintptr) {
		flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		if e == 0 {
			_, _, e = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFL, flags&^syscall.O_DIRECT)
		}
		errno = e
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return fmt.Errorf("turn O_DIRECT off: %w", errno)
	}
	return nil
}
