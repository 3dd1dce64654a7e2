package store

import (
	"sync"
	"testing"

	"github.com/kithmesh/kith/protocol"
)

// GetPeer answers from its cache, and every kind of peer write is seen by
// the next read: a cached answer (found or not) is never staler than the
// last committed write.
func TestPeerCacheFollowsWrites(t *testing.T) {
	s, _ := openTest(t, Options{})
	a := newPeerID(t)

	_, err := s.GetPeer(a) // caches "not found"
	wantErr(t, err, ErrNotFound)
	mustNoErr(t, s.PutPeer(Peer{ID: a, Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}))
	got, err := s.GetPeer(a)
	mustNoErr(t, err)
	if got.Trust != protocol.Untrusted {
		t.Fatalf("after PutPeer: %+v", got)
	}

	mustNoErr(t, s.SetTrust(a, protocol.Trusted, "cli"))
	if got, _ := s.GetPeer(a); got.Trust != protocol.Trusted {
		t.Fatalf("after SetTrust trusted: trust %v", got.Trust)
	}
	mustNoErr(t, s.SetAccess(a, AccessDeny, "cli"))
	if got, _ := s.GetPeer(a); got.Access != AccessDeny {
		t.Fatalf("after SetAccess deny: access %v", got.Access)
	}
	if _, err := s.UpdatePeer(a, func(p *Peer) error { p.Sources = append(p.Sources, "dht"); return nil }); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetPeer(a)
	if len(got.Sources) != 1 || got.Sources[0] != "dht" {
		t.Fatalf("after UpdatePeer: sources %v", got.Sources)
	}

	// What a caller does to its copy does not reach the cache.
	got.Addrs[0] = "changed"
	got.Sources[0] = "changed"
	again, _ := s.GetPeer(a)
	if again.Addrs[0] != "/ip4/127.0.0.1/tcp/1" || again.Sources[0] != "dht" {
		t.Fatalf("a caller's change reached the cache: %+v", again)
	}

	mustNoErr(t, s.DeletePeer(a, "cli"))
	_, err = s.GetPeer(a)
	wantErr(t, err, ErrNotFound)
}

// Readers racing a writer never leave a stale answer behind: once the
// last write has returned, every read sees it.
func TestPeerCacheRacingWriter(t *testing.T) {
	s, _ := openTest(t, Options{NoSync: true})
	a := newPeerID(t)
	mustNoErr(t, s.PutPeer(Peer{ID: a}))
	levels := []protocol.TrustLevel{protocol.Untrusted, protocol.Verified, protocol.Trusted}
	for round := range 200 {
		want := levels[round%len(levels)]
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					if _, err := s.GetPeer(a); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		mustNoErr(t, s.SetTrust(a, want, "test"))
		wg.Wait()
		if got, err := s.GetPeer(a); err != nil || got.Trust != want {
			t.Fatalf("round %d: after SetTrust(%v) and the readers: trust %v, %v", round, want, got.Trust, err)
		}
	}
}
