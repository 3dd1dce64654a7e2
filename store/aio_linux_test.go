package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kithmesh/kith/internal/labtest"
)

// TestDirectWritesAsync: on a Linux kernel with AIO and a file system that
// takes direct I/O and fallocate, a value file's writes and syncs go
// through AIO (their goroutine holds no P while the disk works), and the
// file reads back whole. Elsewhere the blocking path is the one in use,
// which TestFileWriter covers.
func TestDirectWritesAsync(t *testing.T) {
	a := processAIO()
	if a == nil {
		labtest.Lacking(t, labtest.AIORequired, "io_setup is refused here, so value files are written the blocking way (TestFileWriter covers it); run on Linux 4.18 or later outside a sandbox that forbids AIO")
		return // Lacking ends the test
	}
	dir := t.TempDir()
	if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
		ok := preallocate(f, 1<<20)
		_ = f.Close()
		if !ok {
			labtest.Lacking(t, labtest.AIORequired, "the file system of "+dir+" refused fallocate, so its writes are the blocking way; run with TMPDIR on ext4 or XFS")
			return // Lacking ends the test
		}
	}
	w := NewFileWriter()
	v := pattern(1<<20+5, 3)
	before := a.next.Load()
	writeAndCheck(t, w, filepath.Join(dir, "v"), v, true)
	if w.fb.buffered.Load() {
		labtest.Lacking(t, labtest.AIORequired, "the file system of "+dir+" refused direct I/O; run with TMPDIR on ext4 or XFS")
		return // Lacking ends the test
	}
	// The whole blocks' write, at least one, and the file's sync.
	if got := a.next.Load() - before; got < 2 {
		t.Fatalf("%d AIO requests for a direct write and its sync, want at least 2", got)
	}
}

// TestDirectWritesFallBack: a request the kernel refuses to take (here, an
// AIO context that does not exist) is made the blocking way, and the file
// reads back whole.
func TestDirectWritesFallBack(t *testing.T) {
	if processAIO() == nil {
		labtest.Lacking(t, labtest.AIORequired, "io_setup is refused here, so every write is the blocking way already (TestFileWriter covers it); run on Linux 4.18 or later outside a sandbox that forbids AIO")
		return // Lacking ends the test
	}
	bogus := &aioCtx{id: 0, done: map[uint64]int64{}, idle: make(chan *eventFD, aioIdleEventfd)}
	real := aio.Swap(bogus)
	t.Cleanup(func() { aio.Store(real) })
	dir := t.TempDir()
	w := NewFileWriter()
	for i, n := range []int{1 << 20, 1<<20 + 5} {
		writeAndCheck(t, w, filepath.Join(dir, fmt.Sprint(i)), pattern(n, byte(i)), true)
	}
	if got := bogus.next.Load(); got == 0 {
		t.Fatal("no request was tried through the refused context")
	}
}
