package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/protocol"
)

func TestContextDelegationsBounded(t *testing.T) {
	s, _ := openTest(t, Options{Contexts: ContextLimits{MaxDelegations: 3}})
	var ids []protocol.DelegationID
	for range 5 {
		id := protocol.NewDelegationID()
		ids = append(ids, id)
		mustNoErr(t, s.AddToContext("c", id))
	}
	c, err := s.GetContext("c")
	mustNoErr(t, err)
	if fmt.Sprint(c.Delegations) != fmt.Sprint(ids[2:]) {
		t.Fatalf("delegations %v, want the newest three %v", c.Delegations, ids[2:])
	}
}

func TestPruneContextsEvictsOldest(t *testing.T) {
	clk := newFakeClock()
	s, dir := openTest(t, Options{Now: clk.Now, Contexts: ContextLimits{MaxContexts: 2}})
	for _, name := range []protocol.ContextID{"a", "b", "c"} {
		clk.Add(time.Second)
		mustNoErr(t, s.AddToContext(name, protocol.NewDelegationID()))
	}
	clk.Add(time.Second)
	mustNoErr(t, s.AddToContext("a", protocol.NewDelegationID())) // a is now the newest
	n, err := s.PruneContexts()
	mustNoErr(t, err)
	if n != 1 {
		t.Fatalf("pruned %d, want 1", n)
	}
	if _, err := s.GetContext("b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("least recently updated context b: err %v, want ErrNotFound", err)
	}
	for _, name := range []protocol.ContextID{"a", "c"} {
		if _, err := s.GetContext(name); err != nil {
			t.Fatalf("context %s: %v", name, err)
		}
	}
	// The bound holds across a restart: the index is durable.
	s = reopen(t, s, dir, Options{Now: clk.Now, Contexts: ContextLimits{MaxContexts: 1}})
	if n, err := s.PruneContexts(); err != nil || n != 1 {
		t.Fatalf("after reopen pruned %d (%v), want 1", n, err)
	}
	if _, err := s.GetContext("a"); err != nil {
		t.Fatalf("newest context a: %v", err)
	}
}

func turn(s string) ContextTurn {
	return ContextTurn{Delegation: protocol.NewDelegationID(), Data: []byte(s)}
}

func turnsText(c PeerContext) string {
	var b bytes.Buffer
	for _, t := range c.Turns {
		b.Write(t.Data)
		b.WriteByte(' ')
	}
	return b.String()
}

func TestPeerContextTurns(t *testing.T) {
	s, dir := openTest(t, Options{Contexts: ContextLimits{MaxTurns: 3, MaxTurnBytes: 10}})
	alice, mallory := newPeerID(t), newPeerID(t)

	if _, err := s.GetPeerContext(alice, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fresh: err %v, want ErrNotFound", err)
	}
	for _, x := range []string{"1", "2", "3", "4"} {
		_, err := s.AddPeerContextTurns(alice, "c", false, turn(x))
		mustNoErr(t, err)
	}
	c, err := s.GetPeerContext(alice, "c")
	mustNoErr(t, err)
	if got := turnsText(c); got != "2 3 4 " {
		t.Fatalf("turns %q, want the newest three", got)
	}
	// Bytes bound: "2" goes to fit the new turn in 10 bytes.
	c, err = s.AddPeerContextTurns(alice, "c", false, turn("abcdefgh"))
	mustNoErr(t, err)
	if got := turnsText(c); got != "3 4 abcdefgh " || c.Bytes() > 10 {
		t.Fatalf("turns %q (%d bytes), want the newest within 10 bytes", got, c.Bytes())
	}
	if _, err := s.AddPeerContextTurns(alice, "c", false, turn("elevenbytes")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized turn: err %v, want ErrInvalid", err)
	}
	// Replace: a carried history supersedes what was kept.
	c, err = s.AddPeerContextTurns(alice, "c", true, turn("h1"), turn("h2"), turn("n"))
	mustNoErr(t, err)
	if got := turnsText(c); got != "h1 h2 n " {
		t.Fatalf("after replace %q", got)
	}

	// Another requester naming the same context id sees nothing of it.
	if _, err := s.GetPeerContext(mallory, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another peer's view: err %v, want ErrNotFound", err)
	}
	_, err = s.AddPeerContextTurns(mallory, "c", false, turn("m"))
	mustNoErr(t, err)

	// Durable: both survive a reopen, apart.
	s = reopen(t, s, dir, Options{Contexts: ContextLimits{MaxTurns: 3, MaxTurnBytes: 10}})
	c, err = s.GetPeerContext(alice, "c")
	mustNoErr(t, err)
	if got := turnsText(c); got != "h1 h2 n " {
		t.Fatalf("alice after reopen %q", got)
	}
	c, err = s.GetPeerContext(mallory, "c")
	mustNoErr(t, err)
	if got := turnsText(c); got != "m " {
		t.Fatalf("mallory after reopen %q", got)
	}

	for name, err := range map[string]error{
		"empty context": func() error { _, err := s.AddPeerContextTurns(alice, "", false, turn("x")); return err }(),
		"long context": func() error {
			_, err := s.AddPeerContextTurns(alice, protocol.ContextID(bytes.Repeat([]byte("x"), protocol.MaxContextIDLen+1)), false)
			return err
		}(),
		"bad peer": func() error { _, err := s.GetPeerContext("nope", "c"); return err }(),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

func TestPeerContextTTLAndCount(t *testing.T) {
	clk := newFakeClock()
	opts := Options{Now: clk.Now, Contexts: ContextLimits{MaxPeerContexts: 2, TTL: time.Hour}}
	s, _ := openTest(t, opts)
	p := newPeerID(t)
	for _, id := range []protocol.ContextID{"a", "b", "c"} {
		clk.Add(time.Minute)
		_, err := s.AddPeerContextTurns(p, id, false, turn(string(id)))
		mustNoErr(t, err)
	}
	n, err := s.PruneContexts()
	mustNoErr(t, err)
	if n != 1 {
		t.Fatalf("pruned %d, want 1", n)
	}
	if _, err := s.GetPeerContext(p, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("oldest context: err %v, want ErrNotFound", err)
	}
	// Past the TTL, a context reads as gone at once, and a new turn starts
	// it afresh rather than appending to stale turns.
	clk.Add(time.Hour - time.Minute)
	if _, err := s.GetPeerContext(p, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired context b: err %v, want ErrNotFound", err)
	}
	if _, err := s.GetPeerContext(p, "c"); err != nil {
		t.Fatalf("context c, a minute younger: %v", err)
	}
	clk.Add(time.Minute)
	c, err := s.AddPeerContextTurns(p, "c", false, turn("fresh"))
	mustNoErr(t, err)
	if got := turnsText(c); got != "fresh " {
		t.Fatalf("expired context kept %q", got)
	}
	n, err = s.PruneContexts()
	mustNoErr(t, err)
	if n != 1 {
		t.Fatalf("pruned %d expired, want 1 (b)", n)
	}
	var left int
	mustNoErr(t, s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixPeerCtx), nil, false, func(*badger.Item) error { left++; return nil })
	}))
	if left != 1 {
		t.Fatalf("%d provider context records left, want 1", left)
	}
}

// A store written before contexts were indexed (schema 2) is indexed at
// open, so its contexts are bounded too.
func TestMigrate2to3IndexesContexts(t *testing.T) {
	s, dir := openTest(t, Options{})
	for _, id := range []protocol.ContextID{"old1", "old2"} {
		mustNoErr(t, s.AddToContext(id, protocol.NewDelegationID()))
	}
	mustNoErr(t, s.update(nil, func(txn *wtxn) error {
		var keys [][]byte
		if err := scanPrefix(txn, []byte(prefixIdxContext), nil, false, func(it *badger.Item) error {
			keys = append(keys, it.KeyCopy(nil))
			return nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}))
	setSchemaVersion(t, s, 2)
	s = reopen(t, s, dir, Options{Contexts: ContextLimits{MaxContexts: 1}})
	var v uint64
	mustNoErr(t, s.view(func(txn *wtxn) error {
		var err error
		v, err = getUint64(txn, []byte(keySchema))
		return err
	}))
	if v != schemaVersion {
		t.Fatalf("schema %d after migration, want %d", v, schemaVersion)
	}
	if n, err := s.PruneContexts(); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1 legacy context", n, err)
	}
}

func FuzzDecodePeerContext(f *testing.F) {
	p := newPeerID(f)
	c := PeerContext{Peer: p, ID: "ctx", CreatedAt: time.Unix(1, 0), UpdatedAt: time.Unix(2, 0),
		Turns: []ContextTurn{{Delegation: protocol.DelegationID{1}, At: time.Unix(3, 0), Data: []byte(`{"task":"x"}`)}}}
	f.Add(c.encode())
	f.Add([]byte{recordV1})
	f.Add([]byte{recordV1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodePeerContext(b, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		again, err := decodePeerContext(c.encode(), "again")
		if err != nil || fmt.Sprint(again) != fmt.Sprint(c) {
			t.Fatalf("round trip: %v\n%+v\n%+v", err, c, again)
		}
	})
}
