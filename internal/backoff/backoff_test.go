package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestScheduleDoublesToMaxAndResets(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 5 * time.Second}
	want := []time.Duration{1, 2, 4, 5, 5}
	for i, w := range want {
		if got := b.Next(); got != w*time.Second {
			t.Fatalf("wait %d = %v, want %v", i, got, w*time.Second)
		}
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Fatalf("after Reset: %v, want 1s", got)
	}
	// An Initial above Max is capped too.
	b = Backoff{Initial: time.Minute, Max: 10 * time.Second}
	if got := b.Next(); got != 10*time.Second {
		t.Fatalf("Initial above Max: %v, want 10s", got)
	}
}

// Sleep waits the whole wait in fake time, and returns at once when its
// context ends.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Hour) || time.Since(start) != time.Hour {
			t.Fatalf("Sleep(1h) returned after %v", time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start = time.Now()
		if Sleep(ctx, time.Hour) || time.Since(start) != time.Minute {
			t.Fatalf("Sleep with a 1m context returned true or after %v", time.Since(start))
		}
		if Sleep(ctx, 0) {
			t.Fatal("Sleep(0) on an ended context reported true")
		}
	})
}
