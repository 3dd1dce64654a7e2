package store

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
	"github.com/libp2p/go-libp2p/core/peer"
)

func TestPeers(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})

	a, b, c := newPeerID(t), newPeerID(t), newPeerID(t)
	_, err := s.GetPeer(a)
	wantErr(t, err, ErrNotFound)
	wantErr(t, s.DeletePeer(a, "cli"), ErrNotFound)
	wantErr(t, s.PutPeer(Peer{}), ErrInvalid)
	wantErr(t, s.PutPeer(Peer{ID: "not a multihash"}), ErrInvalid)
	wantErr(t, s.SetTrust("not a multihash", protocol.Trusted, "cli"), ErrInvalid)

	for _, id := range []peer.ID{c, a, b} {
		mustNoErr(t, s.PutPeer(Peer{ID: id, Addrs: []string{"/ip4/127.0.0.1/tcp/1"}, Sources: []string{"mdns"}}))
	}
	got, err := s.GetPeer(a)
	mustNoErr(t, err)
	if !got.AddedAt.Equal(clk.Now()) || got.Trust != protocol.Untrusted || got.Access != AccessNone {
		t.Errorf("new peer = %+v, want added now, untrusted, access none", got)
	}

	list, err := s.ListPeers()
	mustNoErr(t, err)
	ids := make([]peer.ID, len(list))
	for i, p := range list {
		ids[i] = p.ID
	}
	if len(ids) != 3 || !slices.IsSorted(ids) {
		t.Errorf("ListPeers IDs = %v, want 3 sorted", ids)
	}

	// PutPeer keeps AddedAt when given none.
	clk.Add(time.Hour)
	mustNoErr(t, s.PutPeer(Peer{ID: a, Addrs: []string{"/ip4/10.0.0.1/tcp/2"}}))
	got, _ = s.GetPeer(a)
	if got.AddedAt.Equal(clk.Now()) || got.Addrs[0] != "/ip4/10.0.0.1/tcp/2" {
		t.Errorf("after re-put = %+v, want the original AddedAt and new addrs", got)
	}

	// UpdatePeer edits in place and creates missing peers.
	d := newPeerID(t)
	p, err := s.UpdatePeer(d, func(p *Peer) error {
		p.Sources = append(p.Sources, "dht")
		p.LastSeen = clk.Now()
		return nil
	})
	mustNoErr(t, err)
	if p.ID != d || p.Sources[0] != "dht" || !p.AddedAt.Equal(clk.Now()) {
		t.Errorf("UpdatePeer created %+v", p)
	}
	_, err = s.UpdatePeer(d, func(p *Peer) error { return fmt.Errorf("boom") })
	if err == nil || err.Error() != "boom" {
		t.Errorf("UpdatePeer did not return the callback's error: %v", err)
	}

	mustNoErr(t, s.DeletePeer(b, "cli"))
	_, err = s.GetPeer(b)
	wantErr(t, err, ErrNotFound)
}

// TestTrustOnlyThroughAudit: PutPeer and UpdatePeer refuse trust and access
// changes, so every such decision is in the audit log.
func TestTrustOnlyThroughAudit(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := newPeerID(t)
	wantErr(t, s.PutPeer(Peer{ID: id, Trust: protocol.Trusted}), ErrInvalid)
	wantErr(t, s.PutPeer(Peer{ID: id, Access: AccessAllow}), ErrInvalid)
	_, err := s.UpdatePeer(id, func(p *Peer) error { p.Trust = protocol.Verified; return nil })
	wantErr(t, err, ErrInvalid)
	_, err = s.UpdatePeer(id, func(p *Peer) error { p.ID = ""; return nil })
	wantErr(t, err, ErrInvalid)
	if log, _ := s.AuditLog(0); len(log) != 0 {
		t.Fatalf("audit log = %+v, want empty", log)
	}

	mustNoErr(t, s.SetTrust(id, protocol.Trusted, "cli"))
	// A later PutPeer that carries the same trust is fine.
	p, _ := s.GetPeer(id)
	p.Addrs = []string{"/ip4/127.0.0.1/udp/1/quic-v1"}
	mustNoErr(t, s.PutPeer(p))
	wantErr(t, s.SetTrust(id, protocol.TrustLevel(9), "cli"), ErrInvalid)
	wantErr(t, s.SetAccess(id, Access(9), "cli"), ErrInvalid)
}

func TestAuditLog(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	a, b := newPeerID(t), newPeerID(t)

	mustNoErr(t, s.SetTrust(a, protocol.Verified, "config"))
	clk.Add(time.Second)
	mustNoErr(t, s.SetTrust(a, protocol.Trusted, "cli"))
	mustNoErr(t, s.SetAccess(b, AccessAllow, "api"))
	mustNoErr(t, s.SetAccess(b, AccessDeny, "api"))
	mustNoErr(t, s.DeletePeer(a, "cli"))

	want := []AuditEntry{
		{Seq: 1, Peer: a, Action: AuditTrust, From: "untrusted", To: "verified", Origin: "config"},
		{Seq: 2, Peer: a, Action: AuditTrust, From: "verified", To: "trusted", Origin: "cli"},
		{Seq: 3, Peer: b, Action: AuditAccess, From: "none", To: "allow", Origin: "api"},
		{Seq: 4, Peer: b, Action: AuditAccess, From: "allow", To: "deny", Origin: "api"},
		{Seq: 5, Peer: a, Action: AuditDelete, From: "trust=trusted access=none", Origin: "cli"},
	}
	got, err := s.AuditLog(0)
	mustNoErr(t, err)
	if len(got) != len(want) {
		t.Fatalf("audit log has %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		g.At = time.Time{}
		if g != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, g, want[i])
		}
	}
	if !got[0].At.Equal(newFakeClock().Now()) || !got[1].At.Equal(clk.Now()) {
		t.Errorf("audit times = %v, %v", got[0].At, got[1].At)
	}

	last2, err := s.AuditLog(2)
	mustNoErr(t, err)
	if len(last2) != 2 || last2[0].Seq != 4 || last2[1].Seq != 5 {
		t.Errorf("AuditLog(2) = %+v, want entries 4 and 5, oldest first", last2)
	}

	pb, _ := s.GetPeer(b)
	if pb.Access != AccessDeny {
		t.Errorf("peer b access = %v, want deny", pb.Access)
	}
}

// TestConcurrentSetTrust: many writers changing trust and access at once.
// Audit sequence numbers stay gap-free and strictly increasing, and the last
// entry for each peer matches what is stored.
func TestConcurrentSetTrust(t *testing.T) {
	s, _ := openTest(t, Options{})
	const writers, each = 32, 10
	peers := make([]peer.ID, 4)
	for i := range peers {
		peers[i] = newPeerID(t)
	}
	levels := []protocol.TrustLevel{protocol.Untrusted, protocol.Verified, protocol.Trusted}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := peers[(w+i)%len(peers)]
				var err error
				if i%3 == 2 {
					err = s.SetAccess(id, Access(w%3), fmt.Sprintf("w%d", w))
				} else {
					err = s.SetTrust(id, levels[(w+i)%3], fmt.Sprintf("w%d", w))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	log, err := s.AuditLog(0)
	mustNoErr(t, err)
	if len(log) != writers*each {
		t.Fatalf("audit log has %d entries, want %d", len(log), writers*each)
	}
	lastTrust := map[peer.ID]string{}
	lastAccess := map[peer.ID]string{}
	for i, e := range log {
		if e.Seq != uint64(i+1) {
			t.Fatalf("entry %d has seq %d: not gap-free and increasing", i, e.Seq)
		}
		// Each entry's From is the previous entry's To for that peer: the
		// audit order is the order the changes were applied.
		prev := map[string]map[peer.ID]string{AuditTrust: lastTrust, AuditAccess: lastAccess}[e.Action]
		if p, ok := prev[e.Peer]; ok && p != e.From {
			t.Errorf("entry %d: From %q, but the previous %s change set %q", e.Seq, e.From, e.Action, p)
		}
		prev[e.Peer] = e.To
	}
	for _, id := range peers {
		p, err := s.GetPeer(id)
		mustNoErr(t, err)
		if lastTrust[id] != "" && p.Trust.String() != lastTrust[id] {
			t.Errorf("peer trust %v, last audit says %s", p.Trust, lastTrust[id])
		}
		if lastAccess[id] != "" && p.Access.String() != lastAccess[id] {
			t.Errorf("peer access %v, last audit says %s", p.Access, lastAccess[id])
		}
	}
}

func TestAccessText(t *testing.T) {
	for _, a := range []Access{AccessNone, AccessAllow, AccessDeny} {
		b, err := a.MarshalText()
		mustNoErr(t, err)
		got, err := ParseAccess(string(b))
		mustNoErr(t, err)
		if got != a {
			t.Errorf("round trip %v → %q → %v", a, b, got)
		}
	}
	if _, err := ParseAccess("maybe"); err == nil || !strings.Contains(err.Error(), "none, allow or deny") {
		t.Errorf("ParseAccess(maybe) = %v", err)
	}
	if _, err := Access(7).MarshalText(); err == nil {
		t.Error("Access(7).MarshalText succeeded")
	}
}

// TestRaiseTrust: raising only raises, leaves denied peers alone, adds an
// unknown peer, and audits exactly the changes it makes.
func TestRaiseTrust(t *testing.T) {
	s, _ := openTest(t, Options{})
	fresh, high, denied := newPeerID(t), newPeerID(t), newPeerID(t)
	mustNoErr(t, s.SetTrust(high, protocol.Trusted, "cli"))
	mustNoErr(t, s.SetAccess(denied, AccessDeny, "cli"))

	for _, tt := range []struct {
		id    peer.ID
		want  protocol.TrustLevel
		raise bool
	}{
		{fresh, protocol.Verified, true},
		{fresh, protocol.Verified, false}, // already there
		{high, protocol.Trusted, false},
		{denied, protocol.Untrusted, false},
	} {
		raised, err := s.RaiseTrust(tt.id, protocol.Verified, "peers add")
		mustNoErr(t, err)
		p, err := s.GetPeer(tt.id)
		mustNoErr(t, err)
		if raised != tt.raise || p.Trust != tt.want {
			t.Errorf("RaiseTrust(%s): raised %v, trust %v; want %v, %v", tt.id, raised, p.Trust, tt.raise, tt.want)
		}
	}
	log, err := s.AuditLog(0)
	mustNoErr(t, err)
	if len(log) != 3 || log[2].Peer != fresh || log[2].From != "untrusted" || log[2].To != "verified" || log[2].Origin != "peers add" {
		t.Errorf("audit log %+v; want the two set-ups and one raise of the fresh peer", log)
	}
}
