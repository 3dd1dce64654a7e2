package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
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
