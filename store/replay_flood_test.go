package store

import (
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/crypto"
)

// forgedHello is a correctly signed Hello from sender to recipient with the
// times given: what a peer running modified code could send.
func forgedHello(t testing.TB, sender, recipient *crypto.Identity, issued, expires time.Time) []byte {
	t.Helper()
	h := crypto.Header{
		Version: crypto.EnvelopeVersion, Type: 1,
		Sender: sender.PeerID(), Recipient: recipient.PeerID(),
		IssuedAt: issued, ExpiresAt: expires,
		Enc: make([]byte, 32),
	}
	if _, err := rand.Read(h.MessageID[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := rand.Read(h.Enc); err != nil {
		t.Fatal(err)
	}
	raw := h.Marshal()
	sig := sender.SignAssertion(crypto.DomainEnvelopeHeader, raw).Signature
	return crypto.Hello{Header: raw, Signature: sig}.Marshal()
}

// replayFootprint counts the replay entries in memory and on disk, and the
// bytes of their keys and values on disk.
func replayFootprint(t testing.TB, s *Store) (mem, disk int, bytes int64) {
	t.Helper()
	mustNoErr(t, s.flushReplay())
	s.replay.mu.Lock()
	mem = len(s.replay.seen)
	s.replay.mu.Unlock()
	mustNoErr(t, s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixReplay), nil, false, func(item *badger.Item) error {
			disk++
			bytes += item.EstimatedSize()
			return nil
		})
	}))
	return mem, disk, bytes
}

// TestReplayFloodOfLongLivedHeaders: a peer floods a node with validly
// signed headers issued a year ago that expire in a hundred years. Each
// must be refused for its lifetime (ErrLifetimeTooLong), and none may leave
// an entry in the replay cache, in memory or on disk; before the cap each
// was accepted and kept for a century.
func TestReplayFloodOfLongLivedHeaders(t *testing.T) {
	s, _ := openTest(t, Options{})
	attacker, victim := newIdentity(t), newIdentity(t)
	const n = 2000
	now := time.Now()
	accepted := 0
	for range n {
		hello := forgedHello(t, attacker, victim, now.AddDate(-1, 0, 0), now.AddDate(100, 0, 0))
		_, err := crypto.Accept(victim, hello, crypto.AcceptParams{Remote: attacker.PeerID(), Replay: s})
		switch {
		case err == nil:
			accepted++
		case !errors.Is(err, crypto.ErrLifetimeTooLong):
			t.Fatalf("Accept = %v, want ErrLifetimeTooLong", err)
		}
	}
	mem, disk, bytes := replayFootprint(t, s)
	t.Logf("flood of %d headers living 100 years: %d accepted; replay cache holds %d entries in memory, %d on disk (%d bytes)", n, accepted, mem, disk, bytes)
	if accepted != 0 || mem != 0 || disk != 0 {
		t.Fatalf("%d of %d long-lived headers accepted, %d entries in memory and %d on disk; want none", accepted, n, mem, disk)
	}
}

func newIdentity(t testing.TB) *crypto.Identity {
	t.Helper()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestReplayCacheFull: a full cache refuses new message IDs with
// crypto.ErrReplayCacheFull and records nothing, still reports every
// remembered ID as seen (no eviction, so no replay), and takes new IDs
// again once entries expire; the bound holds across a restart.
func TestReplayCacheFull(t *testing.T) {
	clk := newFakeClock()
	const max = 100
	opts := Options{Now: clk.Now, MaxReplayEntries: max}
	s, dir := openTest(t, opts)
	sender := newPeerID(t)
	// Expiries an hour or more ahead: badger's wall-clock TTL hides none.
	early, late := clk.Now().Add(time.Hour), clk.Now().Add(2*time.Hour)
	for i := range max {
		exp := late
		if i < 10 {
			exp = early
		}
		seen, err := s.CheckAndRemember(sender, crypto.MessageID{byte(i)}, exp)
		mustNoErr(t, err)
		if seen {
			t.Fatalf("entry %d reported seen", i)
		}
	}
	_, err := s.CheckAndRemember(sender, crypto.MessageID{0xff}, late)
	if !errors.Is(err, crypto.ErrReplayCacheFull) {
		t.Fatalf("CheckAndRemember on a full cache = %v, want ErrReplayCacheFull", err)
	}
	for i := range max {
		if seen, err := s.CheckAndRemember(sender, crypto.MessageID{byte(i)}, late); err != nil || !seen {
			t.Fatalf("remembered entry %d on a full cache: seen %v, err %v; want seen", i, seen, err)
		}
	}

	s = reopen(t, s, dir, opts)
	if _, err := s.CheckAndRemember(sender, crypto.MessageID{0xff}, late); !errors.Is(err, crypto.ErrReplayCacheFull) {
		t.Fatalf("after a restart: %v, want ErrReplayCacheFull", err)
	}
	if seen, _ := s.CheckAndRemember(sender, crypto.MessageID{0xff}, late); seen {
		t.Fatal("a refused ID was recorded")
	}

	// Ten entries expire: ten new IDs fit, the eleventh does not.
	clk.Add(time.Hour)
	for i := range 10 {
		if _, err := s.CheckAndRemember(sender, crypto.MessageID{0xee, byte(i)}, late); err != nil {
			t.Fatalf("new ID %d after expiry: %v", i, err)
		}
	}
	if _, err := s.CheckAndRemember(sender, crypto.MessageID{0xee, 10}, late); !errors.Is(err, crypto.ErrReplayCacheFull) {
		t.Fatalf("eleventh new ID: %v, want ErrReplayCacheFull", err)
	}
	mem, disk, _ := replayFootprint(t, s)
	if mem != max || disk > max+10 {
		t.Fatalf("%d entries in memory, %d on disk; want %d live", mem, disk, max)
	}
}

// TestReplayFloodBounded: a flood of headers with the longest lifetime
// allowed leaves the replay cache at its bound, no further; the streams
// beyond it are refused (crypto.ErrReplayCacheFull), and a replay of an
// accepted one is still caught.
func TestReplayFloodBounded(t *testing.T) {
	const max, n = 200, 800
	s, _ := openTest(t, Options{MaxReplayEntries: max})
	attacker, victim := newIdentity(t), newIdentity(t)
	now := time.Now()
	var first []byte
	accepted, full := 0, 0
	for range n {
		hello := forgedHello(t, attacker, victim, now, now.Add(crypto.MaxEnvelopeTTL))
		_, err := crypto.Accept(victim, hello, crypto.AcceptParams{Remote: attacker.PeerID(), Replay: s})
		switch {
		case err == nil:
			accepted++
			if first == nil {
				first = hello
			}
		case errors.Is(err, crypto.ErrReplayCacheFull):
			full++
		default:
			t.Fatalf("Accept = %v", err)
		}
	}
	mem, disk, bytes := replayFootprint(t, s)
	t.Logf("flood of %d headers living %s against a cache of %d: %d accepted, %d refused full; %d entries in memory, %d on disk (%d bytes)",
		n, crypto.MaxEnvelopeTTL, max, accepted, full, mem, disk, bytes)
	if accepted != max || mem != max || disk != max {
		t.Fatalf("accepted %d, %d entries in memory, %d on disk; want %d each", accepted, mem, disk, max)
	}
	if _, err := crypto.Accept(victim, first, crypto.AcceptParams{Remote: attacker.PeerID(), Replay: s}); !errors.Is(err, crypto.ErrReplayed) {
		t.Fatalf("replay of an accepted header on a full cache: %v, want ErrReplayed", err)
	}
}
