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

	// Work handed one piece at a time runs on the one worker.
	for i := range 20 {
		ran := make(chan struct{})
		w.run(ctx, &wg, func() { close(ran) })
		<-ran
		waitIdle(t, w, 1)
		if got := w.spawned.Load(); got != 1 {
			t.Fatalf("after %d pieces of work: %d goroutines started, want 1", i+1, got)
		}
	}

	// Work that arrives while every worker is busy gets a new one.
	release := make(chan struct{})
	var busy sync.WaitGroup
	for range 3 {
		busy.Add(1)
		w.run(ctx, &wg, func() { busy.Done(); <-release })
	}
	busy.Wait()
	if got := w.spawned.Load(); got != 3 {
		t.Fatalf("3 pieces of work at once: %d goroutines started, want 3", got)
	}
	close(release)
	waitIdle(t, w, 3)

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
