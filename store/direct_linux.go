package store

import "syscall"

// oDirect opens a file for writes that bypass the page cache
// (blobfile.go).
const oDirect = syscall.O_DIRECT

// oDSync makes each write of the commit log return once its data is on the
// disk, with no fdatasync after it (commitlog.go).
const oDSync = syscall.O_DSYNC
