package store

import "syscall"

// oDirect opens a file for writes that bypass the page cache
// (blobfile.go).
const oDirect = syscall.O_DIRECT
