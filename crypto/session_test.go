package crypto

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source for session lifetimes.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (p pair) dialSession(t testing.TB, now func() time.Time) (*Initiator, []byte) {
	t.Helper()
	ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Session: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return ini, hello
}

func (p pair) acceptSession(hello []byte, now func() time.Time) (*Responder, error) {
	return Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay, Now: now, Sessions: true})
}

// setUp runs a setup stream that offers a session, and hands the ack to
// the initiator as protocol.Conn does.
func (p pair) setUp(t testing.TB, now func() time.Time) {
	t.Helper()
	ini, hello := p.dialSession(t, now)
	if !ini.Offered() || ini.InSession() {
		t.Fatalf("first stream: offered %v, in session %v; want an offer", ini.Offered(), ini.InSession())
	}
	res, err := p.acceptSession(hello, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ack()) != AckSize {
		t.Fatalf("ack is %d bytes", len(res.Ack()))
	}
	if err := ini.Control(res.Ack()); err != nil {
		t.Fatal(err)
	}
}

func roundTrip(t testing.TB, ini *Initiator, res *Responder, msg string) {
	t.Helper()
	f, err := ini.Seal([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	got, err := res.Open(f)
	if err != nil || string(got) != msg {
		t.Fatalf("forward: %q, %v", got, err)
	}
	b, err := res.Seal([]byte("re: " + msg))
	if err != nil {
		t.Fatal(err)
	}
	got, err = ini.Open(b)
	if err != nil || string(got) != "re: "+msg {
		t.Fatalf("back: %q, %v", got, err)
	}
}

func TestSessionStreamsAfterOneSetup(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	for i := range 3 {
		ini, hello := p.dialSession(t, nil)
		if !ini.InSession() || ini.Offered() {
			t.Fatalf("stream %d: in session %v, offered %v", i, ini.InSession(), ini.Offered())
		}
		hl, err := ParseHello(hello)
		if err != nil {
			t.Fatal(err)
		}
		if hl.Signature != nil || len(hl.MAC) != 32 {
			t.Fatalf("session hello has a signature (%d bytes) or a %d-byte mac", len(hl.Signature), len(hl.MAC))
		}
		h := ini.Header()
		if h.Version != SessionVersion || h.Enc != nil || h.StreamSeq != uint64(i+1) {
			t.Fatalf("session header %+v", h)
		}
		res, err := p.acceptSession(hello, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ack() != nil {
			t.Fatal("a session stream was acked")
		}
		if res.Header().Sender != p.alice.PeerID() || res.Header().SessionID != h.SessionID {
			t.Fatalf("responder header %+v", res.Header())
		}
		ini.Settle()
		roundTrip(t, ini, res, fmt.Sprintf("stream %d", i))
	}
}

// A responder that speaks protocol 1.1 ignores the offer (the field is
// unknown to it, and signed like the rest); the opener keeps using full
// setups and offers again on a later stream.
func TestSessionOfferIgnoredByOldResponder(t *testing.T) {
	p := newPair(t)
	for range 2 {
		ini, hello := p.dialSession(t, nil)
		if !ini.Offered() {
			t.Fatal("no offer")
		}
		res, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if err != nil {
			t.Fatal(err)
		}
		if res.Ack() != nil {
			t.Fatal("a 1.1 responder acked")
		}
		ini.Settle() // its first sealed frame came without an ack
		roundTrip(t, ini, res, "old")
	}
	if out, _ := p.alice.sessions.counts(); out != 0 {
		t.Fatalf("opener holds %d sessions with a 1.1 peer", out)
	}
}

// A 1.1 opener never offers; a 1.2 responder serves it as before.
func TestOldOpenerNewResponder(t *testing.T) {
	p := newPair(t)
	ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.acceptSession(hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ack() != nil || ini.Header().SessionOffer {
		t.Fatal("a session without an offer")
	}
	roundTrip(t, ini, res, "plain")
}

func TestSessionStreamReplayRefused(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	_, hello := p.dialSession(t, nil)
	if _, err := p.acceptSession(hello, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.acceptSession(hello, nil); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replayed session stream: %v, want ErrReplayed", err)
	}
}

// Streams taken in order may arrive in any order within the window; each
// is accepted once.
func TestSessionStreamsOutOfOrder(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	var hellos [][]byte
	for range 5 {
		_, h := p.dialSession(t, nil)
		hellos = append(hellos, h)
	}
	for _, i := range []int{4, 0, 2, 1, 3} {
		if _, err := p.acceptSession(hellos[i], nil); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
	}
	for i := range hellos {
		if _, err := p.acceptSession(hellos[i], nil); !errors.Is(err, ErrReplayed) {
			t.Fatalf("stream %d again: %v", i+1, err)
		}
	}
}

func TestSessionWindow(t *testing.T) {
	s := &inSession{}
	for _, c := range []struct {
		n    uint64
		want error
	}{
		{5, nil}, {5, ErrReplayed}, {3, nil}, {3, ErrReplayed}, {5 + sessionWindow, nil},
		{5, ErrSessionUnknown}, {6, nil}, {6, ErrReplayed}, {5 + 3*sessionWindow, nil},
		{5 + 2*sessionWindow + 1, nil}, {MaxSessionStreams + 1, ErrSessionUnknown},
	} {
		err := s.admit(c.n)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Fatalf("admit(%d) = %v, want %v", c.n, err, c.want)
		}
	}
}

// A restarted responder (a new Identity for the same key) holds no
// session: it refuses the stream with ErrSessionUnknown, and the opener,
// given the reject frame, drops the session and sets up afresh.
func TestSessionAfterResponderRestart(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	restarted, err := IdentityFromSeed(p.bob.priv.Seed())
	if err != nil {
		t.Fatal(err)
	}
	p.bob = restarted
	ini, hello := p.dialSession(t, nil)
	if _, err := p.acceptSession(hello, nil); !errors.Is(err, ErrSessionUnknown) {
		t.Fatalf("stale session: %v, want ErrSessionUnknown", err)
	}
	if err := ini.Control(RejectFrame()); !errors.Is(err, ErrSessionRejected) {
		t.Fatalf("reject: %v", err)
	}
	if out, _ := p.alice.sessions.counts(); out != 0 {
		t.Fatal("opener kept the rejected session")
	}
	again, hello := p.dialSession(t, nil)
	if again.InSession() || !again.Offered() {
		t.Fatal("after a reject the next stream must be a full setup with an offer")
	}
	res, err := p.acceptSession(hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Control(res.Ack()); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, again, res, "fresh")
}

// After an opener restart the old sessions are gone on its side; it sets
// up a new one, and the responder keeps serving it.
func TestSessionAfterOpenerRestart(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	restarted, err := IdentityFromSeed(p.alice.priv.Seed())
	if err != nil {
		t.Fatal(err)
	}
	p.alice = restarted
	ini, _ := p.dialSession(t, nil)
	if ini.InSession() || !ini.Offered() {
		t.Fatal("a restarted opener must set up afresh")
	}
}

func TestSessionForgeries(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	carol, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	_, hello := p.dialSession(t, nil)
	hl, _ := ParseHello(hello)

	t.Run("other remote peer", func(t *testing.T) {
		_, err := Accept(p.bob, hello, AcceptParams{Remote: carol.PeerID(), Replay: p.replay, Sessions: true})
		if !errors.Is(err, ErrSenderMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tampered mac", func(t *testing.T) {
		mac := bytes.Clone(hl.MAC)
		mac[0] ^= 1
		_, err := p.acceptSession(Hello{Header: hl.Header, MAC: mac}.Marshal(), nil)
		if !errors.Is(err, ErrBadSignature) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tampered header", func(t *testing.T) {
		h, _ := ParseHeader(hl.Header)
		h.Type = 4
		_, err := p.acceptSession(Hello{Header: h.Marshal(), MAC: hl.MAC}.Marshal(), nil)
		if !errors.Is(err, ErrBadSignature) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("another sender's session", func(t *testing.T) {
		h, _ := ParseHeader(hl.Header)
		h.Sender = carol.PeerID()
		_, err := Accept(p.bob, Hello{Header: h.Marshal(), MAC: hl.MAC}.Marshal(), AcceptParams{Remote: carol.PeerID(), Replay: p.replay, Sessions: true})
		if !errors.Is(err, ErrSessionUnknown) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("signature and mac", func(t *testing.T) {
		_, err := p.acceptSession(Hello{Header: hl.Header, MAC: hl.MAC, Signature: make([]byte, 64)}.Marshal(), nil)
		if !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("1.1 responder", func(t *testing.T) {
		_, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrBadVersion) {
			t.Fatalf("got %v", err)
		}
	})
	// The genuine hello still works after all of the above: failed checks
	// used up nothing.
	if _, err := p.acceptSession(hello, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSessionAckForged(t *testing.T) {
	p := newPair(t)
	ini, _ := p.dialSession(t, nil)
	if err := ini.Control(make([]byte, AckSize)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged ack: %v", err)
	}
	if out, _ := p.alice.sessions.counts(); out != 0 {
		t.Fatal("a forged ack installed a session")
	}
	// Control frames are refused once settled, and where none fits.
	if err := ini.Control(RejectFrame()); !errors.Is(err, ErrControlFrame) {
		t.Fatalf("second control frame: %v", err)
	}
	plain, _, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err := plain.Control(RejectFrame()); !errors.Is(err, ErrControlFrame) {
		t.Fatalf("reject on a stream without a session: %v", err)
	}
}

// Keys differ between streams of one session and between directions.
func TestSessionKeySeparation(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	ini1, h1 := p.dialSession(t, nil)
	ini2, h2 := p.dialSession(t, nil)
	res1, err := p.acceptSession(h1, nil)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := p.acceptSession(h2, nil)
	if err != nil {
		t.Fatal(err)
	}
	f1, _ := ini1.Seal([]byte("one"))
	if _, err := res2.Open(f1); !errors.Is(err, ErrTampered) {
		t.Fatalf("stream 1's frame opened on stream 2: %v", err)
	}
	if _, err := ini1.Open(f1); !errors.Is(err, ErrTampered) {
		t.Fatalf("a forward frame opened as a reply: %v", err)
	}
	b2, _ := res2.Seal([]byte("two"))
	if _, err := ini2.Open(b2); err != nil {
		t.Fatal(err)
	}
	_ = res1
}

func TestSessionLifetime(t *testing.T) {
	c := newClock()
	p := newPair(t)
	p.setUp(t, c.now)

	c.add(SessionLifetime - sessionMargin - time.Second)
	ini, hello := p.dialSession(t, c.now)
	if !ini.InSession() {
		t.Fatal("session unused within its lifetime")
	}
	c.add(2 * time.Second)
	again, _ := p.dialSession(t, c.now)
	if again.InSession() || !again.Offered() {
		t.Fatal("opener used a session past its lifetime")
	}
	// The responder keeps it a margin longer: the last stream the opener
	// took in time is still accepted ...
	if _, err := p.acceptSession(hello, c.now); err != nil {
		t.Fatal(err)
	}
	// ... but not past the lifetime.
	c.add(sessionMargin)
	_, _, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := p.bob.sessions.inbound(p.alice.PeerID(), ini.Header().SessionID, c.now())
	if s != nil {
		t.Fatal("responder kept a session past its lifetime")
	}
}

func TestSessionStreamCount(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	s := p.alice.sessions.outbound(p.bob.PeerID(), time.Now())
	s.last.Store(MaxSessionStreams - 1)
	last, hello := p.dialSession(t, nil)
	if !last.InSession() || last.Header().StreamSeq != MaxSessionStreams {
		t.Fatalf("last stream %+v", last.Header())
	}
	if _, err := p.acceptSession(hello, nil); err != nil {
		t.Fatal(err)
	}
	next, _ := p.dialSession(t, nil)
	if next.InSession() || !next.Offered() {
		t.Fatal("opener went past MaxSessionStreams")
	}
}

func TestSessionsPerPeerBounded(t *testing.T) {
	p := newPair(t)
	for range maxSessionsPerPeer + 3 {
		ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Session: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.acceptSession(hello, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ini.Control(res.Ack()); err != nil {
			t.Fatal(err)
		}
		p.alice.sessions.dropOut(p.bob.PeerID(), p.alice.sessions.outbound(p.bob.PeerID(), time.Now()))
	}
	if _, in := p.bob.sessions.counts(); in != maxSessionsPerPeer {
		t.Fatalf("responder holds %d sessions of one peer, cap %d", in, maxSessionsPerPeer)
	}
}

// While one offer waits for its answer, other streams to the same peer do
// not offer: one session set up per peer, not one per concurrent stream.
func TestOneOfferInFlight(t *testing.T) {
	c := newClock()
	p := newPair(t)
	first, _ := p.dialSession(t, c.now)
	second, _ := p.dialSession(t, c.now)
	if !first.Offered() || second.Offered() {
		t.Fatalf("offered: %v, %v", first.Offered(), second.Offered())
	}
	c.add(offerPatience)
	third, _ := p.dialSession(t, c.now)
	if !third.Offered() {
		t.Fatal("an unanswered offer blocks offers for good")
	}
	third.Settle()
	fourth, _ := p.dialSession(t, c.now)
	if !fourth.Offered() {
		t.Fatal("a settled offer blocks the next")
	}
}

// Many streams in one session at once, each accepted exactly once.
func TestSessionConcurrentStreams(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Session: true})
			if err != nil {
				errs <- err
				return
			}
			res, err := p.acceptSession(hello, nil)
			if err != nil {
				errs <- err
				return
			}
			f, _ := ini.Seal(fmt.Appendf(nil, "m%d", i))
			if _, err := res.Open(f); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOpenInPlace(t *testing.T) {
	p := newPair(t)
	p.setUp(t, nil)
	ini, hello := p.dialSession(t, nil)
	res, err := p.acceptSession(hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte("x"), 1000)
	f, _ := ini.Seal(msg)
	pt, err := res.OpenInPlace(f)
	if err != nil || !bytes.Equal(pt, msg) {
		t.Fatal("in-place open", err)
	}
	if &pt[0] != &f[seqSize] {
		t.Fatal("plaintext not in the frame's memory")
	}
	b, _ := res.Seal(msg)
	if pt, err := ini.OpenInPlace(b); err != nil || !bytes.Equal(pt, msg) {
		t.Fatal("in-place open back", err)
	}
}

// AppendSeal seals a plaintext that lies where its ciphertext goes, on
// every kind of stream and in both directions.
func TestAppendSealInPlace(t *testing.T) {
	p := newPair(t)
	msg := bytes.Repeat([]byte("in place "), 100)
	check := func(name string, seal func(dst, pt []byte) ([]byte, error), open func([]byte) ([]byte, error)) {
		t.Helper()
		buf := make([]byte, 3, 3+FrameOverhead+len(msg))
		pt := buf[3+seqSize : 3+seqSize+len(msg)]
		copy(pt, msg)
		f, err := seal(buf[:3], pt)
		if err != nil {
			t.Fatal(err)
		}
		if &f[0] != &buf[0] {
			t.Fatalf("%s: sealed into another buffer", name)
		}
		got, err := open(f[3:])
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	ini, res, _ := p.open(t) // a setup stream: HPKE context one way
	check("setup forward", ini.AppendSeal, res.Open)
	check("setup reply", res.AppendSeal, ini.Open)
	p.setUp(t, nil)
	sini, hello := p.dialSession(t, nil)
	sres, err := p.acceptSession(hello, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("session forward", sini.AppendSeal, sres.Open)
	check("session reply", sres.AppendSeal, sini.Open)
}
