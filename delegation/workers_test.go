package delegation

import (
	"context"
	"sync"
	"testing"
	"time"
)

// waitIdle waits until n workers wait for work.
func waitIdle(t *testing.T, w *workers, n int32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.idle.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("idle workers: %d, want %d", w.idle.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWorkersReuseAndStop(t *testing.T) {
	w := newWorkers()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	// Work handed one piece at a time runs on the workers already started.
	// A piece handed in the instant between a worker counting itself idle
	// and reaching its receive starts another one (run never waits), so a
	// few may start; without reuse, every piece would start its own.
	const pieces = 20
	for range pieces {
		ran := make(chan struct{})
		w.run(ctx, &wg, func() { close(ran) })
		<-ran
		waitIdle(t, w, w.spawned.Load())
	}
	if got := w.spawned.Load(); got > 3 {
		t.Fatalf("%d pieces of work one at a time: %d goroutines started, want at most 3", pieces, got)
	}

	// Work that arrives while every worker is busy gets a new one: the
	// three pieces run at once, on the idle workers and new ones.
	before := w.spawned.Load()
	release := make(chan struct{})
	var busy sync.WaitGroup
	for range 3 {
		busy.Add(1)
		w.run(ctx, &wg, func() { busy.Done(); <-release })
	}
	busy.Wait()
	if got := w.spawned.Load(); got < 3 || got > before+3 {
		t.Fatalf("3 pieces of work at once, %d workers before: %d goroutines started, want 3 to %d", before, got, before+3)
	}
	close(release)
	waitIdle(t, w, w.spawned.Load())

	// Once ctx ends, the idle workers end.
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("workers still running after their context ended")
	}
	if n := w.idle.Load(); n != 0 {
		t.Fatalf("%d workers counted idle after they ended", n)
	}
}

func TestWorkersIdleCap(t *testing.T) {
	w := newWorkers()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	release := make(chan struct{})
	var busy sync.WaitGroup
	for range maxIdleWorkers + 10 {
		busy.Add(1)
		w.run(ctx, &wg, func() { busy.Done(); <-release })
	}
	busy.Wait()
	close(release)
	waitIdle(t, w, maxIdleWorkers)
	// The ten beyond the cap end instead of waiting: wg counts only the
	// ones that wait, which end with ctx.
	cancel()
	wg.Wait()
}
