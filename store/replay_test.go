package store

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kithmesh/kith/crypto"
)

func TestReplaySeenAndExpiry(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	alice, bob := newPeerID(t), newPeerID(t)
	msg := crypto.MessageID{0xaa}
	expires := clk.Now().Add(time.Minute)

	seen, err := s.CheckAndRemember(alice, msg, expires)
	mustNoErr(t, err)
	if seen {
		t.Fatal("first sight reported seen")
	}
	if seen, _ = s.CheckAndRemember(alice, msg, expires); !seen {
		t.Fatal("replay not detected")
	}
	// The same message ID from another sender is another message.
	if seen, _ = s.CheckAndRemember(bob, msg, expires); seen {
		t.Fatal("message ID from another sender reported seen")
	}

	// Once expired, an entry no longer counts, even before any prune.
	clk.Add(time.Minute)
	if seen, _ = s.CheckAndRemember(alice, msg, clk.Now().Add(time.Minute)); seen {
		t.Fatal("expired entry counted as seen")
	}
	// …and the renewed entry counts again.
	if seen, _ = s.CheckAndRemember(alice, msg, clk.Now().Add(time.Minute)); !seen {
		t.Fatal("renewed entry not seen")
	}

	_, err = s.CheckAndRemember(alice, crypto.MessageID{1}, clk.Now())
	wantErr(t, err, ErrInvalid)
	_, err = s.CheckAndRemember("", crypto.MessageID{1}, clk.Now().Add(time.Second))
	wantErr(t, err, ErrInvalid)
}

func TestPruneReplay(t *testing.T) {
	clk := newFakeClock()
	s, dir := openTest(t, Options{Now: clk.Now})
	sender := newPeerID(t)
	// 2500 entries (more than one prune batch) expiring at base+1s…base+2500s.
	// base is an hour ahead so that badger's wall-clock TTL, which counts
	// from the real time of the write, hides none of them while the test runs.
	base := clk.Now().Add(time.Hour)
	const n = 2500
	for i := range n {
		id := crypto.MessageID{byte(i >> 8), byte(i)}
		if _, err := s.CheckAndRemember(sender, id, base.Add(time.Duration(i+1)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := s.PruneReplay(base)
	mustNoErr(t, err)
	if removed != 0 {
		t.Fatalf("pruned %d entries before any expired", removed)
	}
	removed, err = s.PruneReplay(base.Add(1200 * time.Second))
	mustNoErr(t, err)
	if removed != 1200 {
		t.Fatalf("pruned %d, want 1200", removed)
	}
	// Pruned entries are gone from disk, not just hidden: count what is left.
	s = reopen(t, s, dir, Options{Now: clk.Now})
	removed, err = s.PruneReplay(base.Add(n * time.Second))
	mustNoErr(t, err)
	if removed != n-1200 {
		t.Fatalf("second prune removed %d, want %d", removed, n-1200)
	}
	if removed, _ = s.PruneReplay(base.Add(time.Hour)); removed != 0 {
		t.Fatalf("third prune removed %d", removed)
	}

	// A pruned pair is new again.
	if seen, _ := s.CheckAndRemember(sender, crypto.MessageID{0, 5}, clk.Now().Add(time.Minute)); seen {
		t.Fatal("pruned entry counted as seen")
	}
}

// TestReplayWallClockExpiry uses the real clock and a short expiry: the
// entry stops counting once it expires, PruneReplay deletes it, and badger
// holds a TTL that would drop it by itself, no earlier than the expiry.
func TestReplayWallClockExpiry(t *testing.T) {
	s, _ := openTest(t, Options{})
	sender, id := newPeerID(t), crypto.MessageID{7}
	expires := time.Now().Add(100 * time.Millisecond)
	seen, err := s.CheckAndRemember(sender, id, expires)
	mustNoErr(t, err)
	if seen {
		t.Fatal("first sight reported seen")
	}
	mustNoErr(t, s.flushReplay()) // entries reach badger in batches
	mustNoErr(t, s.view(func(txn *wtxn) error {
		item, err := txn.Get(replayKey(sender, id))
		if err != nil {
			return err
		}
		if ttl := int64(item.ExpiresAt()); ttl <= expires.Unix() || ttl > expires.Unix()+3 {
			t.Errorf("badger TTL %d, want just after the expiry %d", ttl, expires.Unix())
		}
		return nil
	}))
	time.Sleep(150 * time.Millisecond)
	removed, err := s.PruneReplay(time.Now())
	mustNoErr(t, err)
	if removed != 1 {
		t.Errorf("PruneReplay removed %d, want 1", removed)
	}
	if seen, _ = s.CheckAndRemember(sender, id, time.Now().Add(time.Minute)); seen {
		t.Fatal("expired entry counted as seen")
	}
}

// TestReplayConcurrent: concurrent calls with one (sender, id) pair, exactly
// one reports "not seen".
func TestReplayConcurrent(t *testing.T) {
	s, _ := openTest(t, Options{})
	sender := newPeerID(t)
	expires := time.Now().Add(time.Hour)
	for round := range 20 {
		id := crypto.MessageID{byte(round), 0x55}
		var fresh atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 16 {
			wg.Go(func() {
				<-start
				seen, err := s.CheckAndRemember(sender, id, expires)
				if err != nil {
					t.Error(err)
				}
				if !seen {
					fresh.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := fresh.Load(); n != 1 {
			t.Fatalf("round %d: %d calls reported not seen, want exactly 1", round, n)
		}
	}
}
