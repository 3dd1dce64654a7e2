package store

import (
	"path/filepath"
	"testing"
)

// TestDirectWritesAsync: on a Linux kernel with AIO and a file system that
// takes direct I/O and fallocate, a value file's writes and syncs go
// through AIO (their goroutine holds no P while the disk works), and the
// file reads back whole. Elsewhere the blocking path is the one in use,
// which TestFileWriter covers.
func TestDirectWritesAsync(t *testing.T) {
	a := processAIO()
	if a == nil {
		t.Skip("io_setup is refused here: value files are written the blocking way (TestFileWriter covers it)")
	}
	dir := t.TempDir()
	w := NewFileWriter()
	v := pattern(1<<20+5, 3)
	before := a.next.Load()
	writeAndCheck(t, w, filepath.Join(dir, "v"), v, true)
	if w.fb.buffered.Load() {
		t.Skip("the file system of " + dir + " refused direct I/O")
	}
	// The whole blocks' write, at least one, and the file's sync.
	if got := a.next.Load() - before; got < 2 {
		t.Fatalf("%d AIO requests for a direct write and its sync, want at least 2", got)
	}
}
