//go:build !linux

package store

import "os"

// oDirect is 0 where kith does not use direct I/O: value files are written
// through the page cache (blobfile.go).
const oDirect = 0

// oDSync is 0 where the commit log syncs with File.Sync after each write.
const oDSync = 0

// clearDirect does nothing: no file is opened with O_DIRECT here.
func clearDirect(*os.File) error { return nil }
