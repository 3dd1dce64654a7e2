//go:build !linux

package store

import (
	"os"
	"sync/atomic"
)

// oDirect is 0 where kith does not use direct I/O: value files are written
// through the page cache (blobwrite.go).
const oDirect = 0

// oDSync is 0 where the commit log syncs with File.Sync after each write.
const oDSync = 0

// clearDirect does nothing: no file is opened with O_DIRECT here.
func clearDirect(*os.File) error { return nil }

// aioOff: there is no AIO here to turn off (aio_linux.go).
var aioOff atomic.Bool

// preallocate reports false: value files are written the blocking way
// here (aio_linux.go).
func preallocate(*os.File, int64) bool { return false }

func aioWrite(*os.File, []byte, int64, func()) (int, error, bool) { return 0, nil, false }

func aioSync(*os.File, bool) (error, bool) { return nil, false }
