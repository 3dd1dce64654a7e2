package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kithmesh/kith/store"
)

// fsyncBlock is what each timed fsync makes durable.
const fsyncBlock = 4 << 10

// measureFsync times n appends of 4 KiB, each followed by f.Sync, on a
// temporary file in dir: the cost a durable store pays at the least for
// each sync it waits for on that disk.
func measureFsync(ctx context.Context, dir string, n int) (_ Latency, err error) {
	f, err := os.CreateTemp(dir, "fsync-*.tmp")
	if err != nil {
		return Latency{}, fmt.Errorf("bench: fsync probe: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close(), os.Remove(f.Name())) }()
	block := make([]byte, fsyncBlock)
	for i := range block {
		block[i] = byte(i * 7)
	}
	ds := make([]time.Duration, 0, n)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		block[0] = byte(i) // never the same page content twice
		t0 := time.Now()
		if _, err := f.Write(block); err != nil {
			return Latency{}, fmt.Errorf("bench: fsync probe: %w", err)
		}
		if err := f.Sync(); err != nil {
			return Latency{}, fmt.Errorf("bench: fsync probe: %w", err)
		}
		ds = append(ds, time.Since(t0))
	}
	if err := ctx.Err(); err != nil {
		return Latency{}, err
	}
	return summarise(ds), nil
}

// writeProbe writes payloads to new files in dir, one after another, each
// in one write and synced before the next, through the page cache or past
// it (O_DIRECT): what making them durable costs on that disk at the least,
// written the way a durable store writes its value files
// (store.FileWriter, the store's own code). Several payloads rather than
// one, because a disk that takes a first burst faster than it can keep up
// would otherwise show only the burst. The files stay until the caller
// removes dir, as a store's do: a page cache that reuses the pages of
// files just removed takes new bytes several times faster, on some virtual
// machines, than pages it has not held before (16 MiB in 4.5 ms against
// 36–48 ms where this was measured), and the stores' files get no such
// reuse.
type writeProbe struct {
	w     *store.FileWriter
	dir   string
	files int // written so far, for the next one's name
	// noDirect is set once a direct write was refused: the platform or
	// the file system does not take O_DIRECT.
	noDirect bool
}

// writes writes b to n new files. Direct writes are
// errors.ErrUnsupported, and set noDirect, where the platform or the file
// system does not take them.
func (p *writeProbe) writes(b []byte, n int, direct bool) error {
	for range n {
		p.files++
		err := p.w.WriteSynced(filepath.Join(p.dir, fmt.Sprintf("write-%d", p.files)), b, direct)
		if errors.Is(err, errors.ErrUnsupported) {
			p.noDirect = true
			return err
		}
		if err != nil {
			return fmt.Errorf("bench: synced write probe: %w", err)
		}
	}
	return nil
}
