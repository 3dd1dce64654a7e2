package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Envelope sessions (protocol 1.2).
//
// A full stream setup costs three X25519 operations, an Ed25519 signature
// and a verification. A session keeps the outcome of one such setup and
// derives the keys of later streams to the same peer from it:
//
//	setup stream (header version 1, signed, session_offer = true)
//	  S        = HPKE context.Export("kith session v1", 32)
//	  helloKey = HKDF-Expand(S, "kith session hello key v1", 32)
//	  ack      = HKDF-Expand(S, "kith session ack v1", 16)  responder -> opener, in the clear
//	session stream n (header version 2: session_id, stream_seq = n, fresh message_id, times)
//	  H        = the header bytes
//	  mac      = HMAC-SHA256(helloKey, H)                    in the Hello instead of a signature
//	  k        = HKDF-Expand(S, "kith session stream v1 " || H, 64)
//	  k[0:32]  opener -> responder AES-256-GCM key, k[32:64] responder -> opener;
//	  nonces from each direction's frame sequence, AAD H, as on a setup stream.
//
// The argument that this keeps the envelope's guarantees is in
// protocol/doc.go ("Envelope sessions").

// SessionVersion is the header version of a stream inside a session.
const SessionVersion = 2

// Session bounds. The responder keeps a session for SessionLifetime from
// the moment it accepted the setup; the opener stops using it
// sessionMargin earlier (its clock started first), so a session the opener
// still uses has not expired at the responder, barring a restart or an
// eviction, which the reject frame covers.
const (
	SessionLifetime   = 10 * time.Minute
	sessionMargin     = time.Minute
	MaxSessionStreams = 1 << 16 // streams per session
	// sessionWindow is how far out of order a session stream may arrive:
	// stream numbers are taken in order but streams opened concurrently
	// may be accepted in any order.
	sessionWindow = 1024
	// maxSessionsPerPeer and MaxSessions bound a responder's memory (about
	// 400 bytes a session). A peer's older sessions give way to its newer
	// ones; when all MaxSessions are live, offers go unanswered and
	// streams keep the full setup.
	maxSessionsPerPeer = 4
	MaxSessions        = 4096
	// offerPatience is how long an opener waits for the answer to one
	// offer before another stream to the same peer may offer again: one
	// offer in flight per peer, not one per concurrent stream.
	offerPatience = 10 * time.Second
)

// Session errors.
var (
	// ErrSessionUnknown: a session stream names a session this node does not
	// hold (it restarted, or the session expired, ran out of streams or was
	// evicted). The responder answers with a reject frame and waits for a
	// full setup on the same stream.
	ErrSessionUnknown = errors.New("crypto: unknown or expired envelope session")
	// ErrSessionRejected: the responder does not hold the session the stream
	// used; the opener has dropped it and must set the stream up again.
	ErrSessionRejected = errors.New("crypto: envelope session rejected by the responder")
	// ErrControlFrame: a clear-text control frame where none may come.
	ErrControlFrame = errors.New("crypto: unexpected envelope control frame")
)

// Control frames travel in the clear, responder to opener, before the
// first sealed frame. Both are shorter than FrameOverhead, so no sealed
// frame can be taken for one.
const (
	// AckSize is the size of a session ack: the value only the holder of
	// the offered HPKE context can compute.
	AckSize = 16
	// RejectFrame says the responder does not hold the stream's session.
	rejectUnknown byte = 1
)

// RejectFrame is the control frame a responder sends for ErrSessionUnknown.
func RejectFrame() []byte { return []byte{rejectUnknown} }

// IsControlFrame reports whether a frame from the responder is a clear-text
// control frame rather than a sealed one.
func IsControlFrame(frame []byte) bool { return len(frame) < FrameOverhead }

const (
	sessionExportLabel = "kith session v1"
	helloKeyLabel      = "kith session hello key v1"
	ackLabel           = "kith session ack v1"
	streamKeyLabel     = "kith session stream v1 "
)

// sessionKeys is what both sides derive from a setup stream's context.
type sessionKeys struct {
	id       MessageID // the setup stream's message ID
	secret   []byte    // S
	helloKey []byte
}

func deriveSession(id MessageID, export func(string, int) ([]byte, error)) (sessionKeys, []byte, error) {
	s, err := export(sessionExportLabel, 32)
	if err != nil {
		return sessionKeys{}, nil, fmt.Errorf("crypto: export session secret: %w", err)
	}
	hk, err := hkdf.Expand(sha256.New, s, helloKeyLabel, 32)
	if err != nil {
		return sessionKeys{}, nil, err
	}
	ack, err := hkdf.Expand(sha256.New, s, ackLabel, AckSize)
	if err != nil {
		return sessionKeys{}, nil, err
	}
	return sessionKeys{id: id, secret: s, helloKey: hk}, ack, nil
}

func (k sessionKeys) mac(header []byte) []byte {
	m := hmac.New(sha256.New, k.helloKey)
	m.Write(header)
	return m.Sum(nil)
}

// streamKeys derives a session stream's two AEADs from its header bytes.
func (k sessionKeys) streamKeys(header []byte) (fwd, back cipher.AEAD, err error) {
	b, err := hkdf.Expand(sha256.New, k.secret, streamKeyLabel+string(header), 64)
	if err != nil {
		return nil, nil, err
	}
	if fwd, err = newGCM(b[:32]); err != nil {
		return nil, nil, err
	}
	if back, err = newGCM(b[32:]); err != nil {
		return nil, nil, err
	}
	return fwd, back, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("crypto: stream cipher: %w", err)
	}
	return cipher.NewGCM(block)
}

// outSession is a session this node opens streams in.
type outSession struct {
	sessionKeys
	useUntil time.Time
	last     atomic.Uint64 // the last stream number taken
}

// take returns the next stream number, or false when the session is used
// up or too old to use.
func (s *outSession) take(now time.Time) (uint64, bool) {
	if !now.Before(s.useUntil) {
		return 0, false
	}
	n := s.last.Add(1)
	return n, n <= MaxSessionStreams
}

// pendingOffer is a setup stream's offer, waiting for the responder's ack.
type pendingOffer struct {
	keys   sessionKeys
	ack    []byte
	sentAt time.Time
}

// inSession is a session this node accepts streams in.
type inSession struct {
	sessionKeys
	peer    peer.ID
	created time.Time
	expires time.Time

	mu   sync.Mutex
	top  uint64 // highest stream number accepted
	seen [sessionWindow / 64]uint64
}

// admit records stream number n, refusing one already seen (ErrReplayed)
// and one too old to tell (ErrSessionUnknown, so that the opener falls back
// to a full setup rather than fail).
func (s *inSession) admit(n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bit := func(n uint64) (int, uint64) { return int(n % sessionWindow / 64), 1 << (n % 64) }
	switch {
	case n > MaxSessionStreams:
		return fmt.Errorf("%w: stream %d, at most %d a session", ErrSessionUnknown, n, MaxSessionStreams)
	case n > s.top:
		for m := s.top + 1; m < n && m <= s.top+sessionWindow; m++ {
			w, b := bit(m)
			s.seen[w] &^= b
		}
		s.top = n
	case s.top-n >= sessionWindow:
		return fmt.Errorf("%w: stream %d is more than %d behind %d", ErrSessionUnknown, n, sessionWindow, s.top)
	default:
		if w, b := bit(n); s.seen[w]&b != 0 {
			return fmt.Errorf("%w: session stream %d", ErrReplayed, n)
		}
	}
	w, b := bit(n)
	s.seen[w] |= b
	return nil
}

type inKey struct {
	peer peer.ID
	id   MessageID
}

// sessionTable holds one identity's sessions, both ways.
type sessionTable struct {
	mu     sync.Mutex
	out    map[peer.ID]*outSession
	offers map[peer.ID]time.Time
	in     map[inKey]*inSession
}

func newSessionTable() *sessionTable {
	return &sessionTable{
		out:    make(map[peer.ID]*outSession),
		offers: make(map[peer.ID]time.Time),
		in:     make(map[inKey]*inSession),
	}
}

// outbound returns the session to open streams to p in, if any.
func (t *sessionTable) outbound(p peer.ID, now time.Time) *outSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.out[p]
	if s != nil && !now.Before(s.useUntil) {
		delete(t.out, p)
		return nil
	}
	return s
}

// mayOffer reports whether a new stream to p should offer a session: none
// is held and no other offer to p is waiting for its answer. It records the
// offer when it says yes.
func (t *sessionTable) mayOffer(p peer.ID, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.out[p]; s != nil && now.Before(s.useUntil) && s.last.Load() < MaxSessionStreams {
		return false
	}
	if at, ok := t.offers[p]; ok && now.Sub(at) < offerPatience {
		return false
	}
	if len(t.offers) >= MaxSessions {
		for q, at := range t.offers {
			if now.Sub(at) >= offerPatience {
				delete(t.offers, q)
			}
		}
		if len(t.offers) >= MaxSessions {
			return false
		}
	}
	t.offers[p] = now
	return true
}

// settle ends the wait for the answer to an offer to p made at sentAt.
func (t *sessionTable) settle(p peer.ID, sentAt time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.offers[p]; ok && at.Equal(sentAt) {
		delete(t.offers, p)
	}
}

func (t *sessionTable) putOut(p peer.ID, s *outSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out[p] = s
}

// dropOut forgets s, if it is still the session held for p.
func (t *sessionTable) dropOut(p peer.ID, s *outSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.out[p] == s {
		delete(t.out, p)
	}
}

// inbound returns p's live session id.
func (t *sessionTable) inbound(p peer.ID, id MessageID, now time.Time) *inSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := inKey{p, id}
	s := t.in[k]
	if s != nil && !now.Before(s.expires) {
		delete(t.in, k)
		return nil
	}
	return s
}

// putIn keeps a session p set up, making room among p's own sessions. It
// reports false, keeping nothing, when the table is full of live sessions.
func (t *sessionTable) putIn(s *inSession, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var oldest *inSession
	mine := 0
	for k, x := range t.in {
		if !now.Before(x.expires) {
			delete(t.in, k)
			continue
		}
		if x.peer == s.peer {
			mine++
			if oldest == nil || x.created.Before(oldest.created) {
				oldest = x
			}
		}
	}
	if mine >= maxSessionsPerPeer {
		delete(t.in, inKey{oldest.peer, oldest.id})
	}
	if len(t.in) >= MaxSessions {
		return false
	}
	t.in[inKey{s.peer, s.id}] = s
	return true
}

// counts reports how many sessions the table holds each way (for tests).
func (t *sessionTable) counts() (out, in int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.out), len(t.in)
}
