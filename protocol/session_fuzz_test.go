package protocol

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/kithmesh/kith/crypto"
)

// memStream reads a fixed byte string and swallows writes: a peer that
// sends exactly those bytes, whatever it is told.
type memStream struct {
	r   *bytes.Reader
	out bytes.Buffer
}

func (s *memStream) Read(b []byte) (int, error)       { return s.r.Read(b) }
func (s *memStream) Write(b []byte) (int, error)      { return s.out.Write(b) }
func (s *memStream) SetReadDeadline(time.Time) error  { return nil }
func (s *memStream) SetWriteDeadline(time.Time) error { return nil }

// sessionPeers returns Alice and a Bob that holds a session with her, and
// what Alice sent on a session stream carrying an offer.
func sessionPeers(t testing.TB) (alice, bob *crypto.Identity, sessionStream []byte) {
	alice, bob = fixedIdentity(t, 1), fixedIdentity(t, 2)
	replay := crypto.NewMemoryReplayCache(nil)
	ini, hello, err := crypto.Dial(alice, bob.PeerID(), crypto.DialParams{Type: uint32(TypeCapabilityQuery), Session: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := crypto.Accept(bob, hello, crypto.AcceptParams{Remote: alice.PeerID(), Replay: replay, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ini.Control(res.Ack()); err != nil {
		t.Fatal(err)
	}
	var s memStream
	s.r = bytes.NewReader(nil)
	if _, err := DialEncoded(&s, alice, bob.PeerID(), TypeDelegationOffer, fixtureEncoded(t, TypeDelegationOffer), ConnOptions{}); err != nil {
		t.Fatal(err)
	}
	return alice, bob, s.out.Bytes()
}

// FuzzAcceptStream feeds a whole inbound stream to Accept on a node that
// holds a session with the sender: session Hellos, the reject path (skip
// sealed frames, then a full Hello) and the first frames. It must end with
// a message or an error, never panic or read past its bounds.
func FuzzAcceptStream(f *testing.F) {
	alice, bob, good := sessionPeers(f)
	f.Add(good)
	stale := bytes.Clone(good)
	stale[10] ^= 0xff // somewhere in the header: unknown session or bad mac
	f.Add(stale)
	f.Add(frameBytes([]byte{0x0a, 0x00, 0x1a, 0x00}, make([]byte, 30), []byte{0x0a, 0x01}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		s := &memStream{r: bytes.NewReader(in)}
		_, first, _, err := Accept(s, bob, alice.PeerID(), crypto.NewMemoryReplayCache(nil), ConnOptions{MaxFrame: 1 << 16})
		if err == nil && first == nil {
			t.Fatal("no error and no message")
		}
	})
}

// FuzzOpenerReplies feeds arbitrary answers to an opener that offered a
// session and to one whose stream runs in a session: control frames in
// the clear, a reject (which makes it set the stream up again), sealed
// frames. Only the true ack may install a session; nothing panics.
func FuzzOpenerReplies(f *testing.F) {
	f.Add(frameBytes(crypto.RejectFrame(), make([]byte, 40)))
	f.Add(frameBytes(make([]byte, crypto.AckSize), make([]byte, 40)))
	f.Add(frameBytes(crypto.RejectFrame(), crypto.RejectFrame()))
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		alice, bob, _ := sessionPeers(t)
		for _, inSession := range []bool{true, false} {
			if !inSession {
				alice = fixedIdentity(t, 1) // none held: this stream offers
			}
			s := &memStream{r: bytes.NewReader(nil)}
			c, err := Dial(s, alice, bob.PeerID(), &CapabilityQuery{Versions: Supported}, ConnOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.r = bytes.NewReader(in)
			_, _ = c.Recv(time.Second)
			if !inSession && c.InSession() {
				t.Fatal("a forged reply put the stream in a session")
			}
		}
	})
}

var _ io.Reader = (*memStream)(nil)

// writeCounter is a memStream that counts Writes.
type writeCounter struct {
	memStream
	writes int
}

func (w *writeCounter) Write(b []byte) (int, error) { w.writes++; return w.memStream.Write(b) }

// Queued messages go out with the next Flush or Send, in one Write, and in
// order.
func TestQueueFlushOneWrite(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	s := &writeCounter{memStream: memStream{r: bytes.NewReader(nil)}}
	c, err := Dial(s, alice, bob.PeerID(), &CapabilityQuery{Versions: Supported}, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.writes != 1 {
		t.Fatalf("Dial made %d writes", s.writes)
	}
	id := NewDelegationID()
	msgs := []Message{&DelegationStatus{ID: id, Seq: 1}, &DelegationStatus{ID: id, Seq: 2}, &DelegationCancel{ID: id, Reason: "r"}}
	b, _ := EncodeMessage(msgs[0])
	if err := c.QueueEncoded(b); err != nil {
		t.Fatal(err)
	}
	if err := c.Queue(msgs[1]); err != nil {
		t.Fatal(err)
	}
	if s.writes != 1 {
		t.Fatal("Queue wrote")
	}
	if err := c.Send(msgs[2]); err != nil {
		t.Fatal(err)
	}
	if s.writes != 2 {
		t.Fatalf("Queue, Queue, Send made %d writes, want 1", s.writes-1)
	}
	// Bob reads the Hello, the query and the three, in order.
	in := &memStream{r: bytes.NewReader(s.out.Bytes())}
	bc, first, _, err := Accept(in, bob, alice.PeerID(), crypto.NewMemoryReplayCache(nil), ConnOptions{})
	if err != nil || first.Type() != TypeCapabilityQuery {
		t.Fatal(first, err)
	}
	for _, want := range msgs {
		m, err := bc.Recv(time.Second)
		if err != nil || m.Type() != want.Type() {
			t.Fatalf("got %v %v, want %s", m, err, want.Type())
		}
		if st, ok := m.(*DelegationStatus); ok && st.Seq != want.(*DelegationStatus).Seq {
			t.Fatal("out of order")
		}
	}
}
