package protocol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
)

// countingStream counts the Writes on a libp2p stream: each is at least
// one muxer frame.
type countingStream struct {
	network.Stream
	writes *atomic.Int64
}

func (s countingStream) Write(b []byte) (int, error) {
	s.writes.Add(1)
	return s.Stream.Write(b)
}

// served is what the responder side saw of one stream.
type served struct {
	first     Message
	raw       []byte
	inSession bool // the stream's header was a session stream's
	err       error
}

// sessionNet is two libp2p hosts on a mocknet: Alice opens streams, Bob
// accepts them with Accept and answers every first message with an
// accept (a cancel gets no answer), as a provider does.
type sessionNet struct {
	t         *testing.T
	alice     *crypto.Identity
	bob       atomic.Pointer[crypto.Identity] // swapped to simulate a restart
	ha, hb    host.Host
	aliceOpts ConnOptions
	bobOpts   ConnOptions
	served    chan served
	bobWrites atomic.Int64
	replay    *crypto.MemoryReplayCache
}

func newSessionNet(t *testing.T, aliceVersion, bobVersion Version) *sessionNet {
	t.Helper()
	n := &sessionNet{t: t, alice: fixedIdentity(t, 1), served: make(chan served, 16), replay: crypto.NewMemoryReplayCache(nil)}
	n.bob.Store(fixedIdentity(t, 2))
	n.aliceOpts = ConnOptions{IOTimeout: 5 * time.Second, Version: aliceVersion}
	n.bobOpts = ConnOptions{IOTimeout: 5 * time.Second, Version: bobVersion}
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	var err error
	if n.ha, err = mn.AddPeer(n.alice.Libp2pKey(), ma.StringCast("/ip4/127.0.0.1/tcp/4001")); err != nil {
		t.Fatal(err)
	}
	if n.hb, err = mn.AddPeer(n.bob.Load().Libp2pKey(), ma.StringCast("/ip4/127.0.0.1/tcp/4002")); err != nil {
		t.Fatal(err)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	n.hb.SetStreamHandler(ID, func(s network.Stream) {
		defer s.Close()
		cs := countingStream{s, &n.bobWrites}
		c, first, raw, err := Accept(cs, n.bob.Load(), s.Conn().RemotePeer(), n.replay, n.bobOpts)
		if err != nil {
			_ = s.Reset()
			n.served <- served{err: err}
			return
		}
		n.served <- served{first: first, raw: raw, inSession: c.Header().Version == crypto.SessionVersion}
		if first.Type() == TypeDelegationCancel {
			return
		}
		id := NewDelegationID()
		if o, ok := first.(*DelegationOffer); ok {
			id = o.ID
		}
		// An accept followed at once by a status: one Write with the ack.
		if err := c.Queue(&DelegationAccept{ID: id, ProviderHandle: "h"}); err != nil {
			return
		}
		_ = c.Send(&DelegationStatus{ID: id, State: StateRunning, Seq: 1})
		// Wait for the opener to close, so the answer is read.
		_, _ = c.Recv(5 * time.Second)
	})
	return n
}

// stream opens one stream from Alice with first and reads Bob's answer. It
// returns Alice's Conn, what Bob served, and the Writes Alice made.
func (n *sessionNet) stream(first Message) (*Conn, served, int64) {
	n.t.Helper()
	s, err := n.ha.NewStream(context.Background(), n.hb.ID(), ID)
	if err != nil {
		n.t.Fatal(err)
	}
	defer s.Close()
	var writes atomic.Int64
	c, err := Dial(countingStream{s, &writes}, n.alice, n.hb.ID(), first, n.aliceOpts)
	if err != nil {
		n.t.Fatal(err)
	}
	dialWrites := writes.Load()
	if first.Type() != TypeDelegationCancel {
		m, err := c.Recv(5 * time.Second)
		if err != nil {
			n.t.Fatalf("reading the answer: %v", err)
		}
		if _, ok := m.(*DelegationAccept); !ok {
			n.t.Fatalf("answer %s", m.Type())
		}
		if m, err := c.Recv(5 * time.Second); err != nil || m.Type() != TypeDelegationStatus {
			n.t.Fatalf("second answer: %v %v", m, err)
		}
	}
	var sv served
	select {
	case sv = <-n.served:
	case <-time.After(10 * time.Second):
		n.t.Fatal("responder saw no stream")
	}
	if sv.err != nil {
		n.t.Fatalf("responder: %v", sv.err)
	}
	return c, sv, dialWrites
}

func sessionOffer(text string) *DelegationOffer {
	return &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Role: "user", Parts: []Part{TextPart(text)}}}
}

func checkFirst(t *testing.T, sent Message, sv served) {
	t.Helper()
	want, _ := EncodeMessage(sent)
	if !bytes.Equal(sv.raw, want) {
		t.Fatalf("responder got %s, not the message sent", sv.first.Type())
	}
}

func TestSessionAcrossStreams(t *testing.T) {
	n := newSessionNet(t, Version{}, Version{})
	for i := range 4 {
		o := sessionOffer(fmt.Sprint("task ", i))
		c, sv, writes := n.stream(o)
		checkFirst(t, o, sv)
		if want := i > 0; c.InSession() != want || sv.inSession != want {
			t.Fatalf("stream %d: opener in session %v, responder %v; want %v", i, c.InSession(), sv.inSession, want)
		}
		if writes != 1 {
			t.Fatalf("stream %d: Dial made %d writes; the Hello and the first message go in one", i, writes)
		}
	}
	// Bob answered each stream with one Write (accept and status, and on
	// the first stream the session ack, coalesced) and one more for the
	// status Send: Queue+Send is one Write.
	if w := n.bobWrites.Load(); w != 4 {
		t.Fatalf("responder made %d writes for 4 streams, want 4", w)
	}
}

// Mixed versions: a 1.2 node and a node that speaks only 1.1 (or 1.0)
// interoperate both ways, every stream set up in full.
func TestSessionWithOldPeers(t *testing.T) {
	for _, c := range []struct {
		name       string
		alice, bob Version
	}{
		{"new opener, 1.1 responder", Version{}, Version{1, 1}},
		{"1.1 opener, new responder", Version{1, 1}, Version{}},
		{"new opener, 1.0 responder", Version{}, Version{1, 0}},
		{"1.0 opener, new responder", Version{1, 0}, Version{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newSessionNet(t, c.alice, c.bob)
			for i := range 3 {
				o := sessionOffer(fmt.Sprint("task ", i))
				conn, sv, _ := n.stream(o)
				checkFirst(t, o, sv)
				if conn.InSession() || sv.inSession {
					t.Fatalf("stream %d ran in a session with a 1.1 peer", i)
				}
				if conn.Header().SessionOffer && c.alice != (Version{}) {
					t.Fatal("a 1.1 opener offered a session")
				}
			}
		})
	}
}

// A responder that lost its sessions (a restart) rejects the stale
// session; the opener sets the same stream up again, and the first
// message arrives once, intact. The next stream runs in a new session.
func TestSessionResponderRestart(t *testing.T) {
	n := newSessionNet(t, Version{}, Version{})
	n.stream(sessionOffer("set up"))
	for _, size := range []int{10, 3*ChunkSize + 5} {
		n.bob.Store(fixedIdentity(t, 2)) // same key, no sessions
		o := sessionOffer(string(bytes.Repeat([]byte("x"), size)))
		c, sv, _ := n.stream(o)
		checkFirst(t, o, sv)
		if c.InSession() || sv.inSession {
			t.Fatal("the stream stayed in the rejected session")
		}
		select {
		case extra := <-n.served:
			t.Fatalf("the stream was served twice: %+v", extra)
		default:
		}
		c, _, _ = n.stream(sessionOffer("after"))
		if !c.InSession() {
			t.Fatal("no new session after the restart")
		}
	}
}

// A cancel gets no answer, so it neither offers nor uses a session.
func TestCancelStreamsSetUpInFull(t *testing.T) {
	n := newSessionNet(t, Version{}, Version{})
	n.stream(sessionOffer("set up"))
	cancel := &DelegationCancel{ID: NewDelegationID(), Reason: "x"}
	c, sv, _ := n.stream(cancel)
	checkFirst(t, cancel, sv)
	if c.InSession() || c.Header().SessionOffer {
		t.Fatal("a cancel stream used or offered a session")
	}
}

// Many streams in one session at once.
func TestSessionConcurrentConns(t *testing.T) {
	n := newSessionNet(t, Version{}, Version{})
	n.stream(sessionOffer("set up"))
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 16 {
		wg.Go(func() {
			s, err := n.ha.NewStream(context.Background(), n.hb.ID(), ID)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			c, err := Dial(s, n.alice, n.hb.ID(), sessionOffer("c"), n.aliceOpts)
			if err != nil {
				errs <- err
				return
			}
			if !c.InSession() {
				errs <- errors.New("not in session")
			}
			if _, err := c.Recv(5 * time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	for range 16 {
		if sv := <-n.served; sv.err != nil || !sv.inSession {
			t.Errorf("served %+v", sv)
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
