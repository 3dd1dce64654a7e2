package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/hpke"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Envelope errors. Each names the check that failed; all of them are raised
// before any plaintext is released, and none changes receiver state.
var (
	ErrWrongRecipient = errors.New("crypto: envelope addressed to another peer")
	ErrSenderMismatch = errors.New("crypto: envelope sender is not the stream's remote peer")
	ErrExpired        = errors.New("crypto: envelope expired")
	ErrFromFuture     = errors.New("crypto: envelope issued too far in the future")
	ErrReplayed       = errors.New("crypto: envelope or frame replayed")
	ErrTampered       = errors.New("crypto: frame failed authentication")
	ErrOutOfOrder     = errors.New("crypto: frame out of order")
	ErrBadVersion     = errors.New("crypto: unsupported envelope version")
	ErrFrameTooShort  = errors.New("crypto: sealed frame too short")
	ErrSequence       = errors.New("crypto: frame sequence exhausted")
	// ErrLifetimeTooLong: the header asks to stay valid for longer than
	// MaxEnvelopeTTL plus the allowed clock skew. Its message ID would have
	// to be remembered that long, so a flood of such headers could grow
	// the replay cache without bound.
	ErrLifetimeTooLong = errors.New("crypto: envelope lifetime too long")
)

// EnvelopeVersion is the header version this package writes and accepts.
const EnvelopeVersion = 1

// Header lifetimes. A receiver refuses a header whose expires_at − issued_at
// exceeds MaxEnvelopeTTL plus its allowed skew (ErrLifetimeTooLong), so a
// replay cache entry never outlives issued_at + MaxEnvelopeTTL + 2×skew.
const (
	DefaultEnvelopeTTL = 5 * time.Minute
	MaxEnvelopeTTL     = DefaultEnvelopeTTL
	DefaultMaxSkew     = 30 * time.Second
)

// hpkeInfo binds every HPKE context to this protocol and envelope version.
const hpkeInfo = "kith envelope v1"

// responderExportLabel is the HPKE exporter context for the key of frames
// sent back by the responder (as Oblivious HTTP does for responses).
const responderExportLabel = "kith responder frames v1"

// seqSize is the size of the explicit sequence number in front of every
// sealed frame. The nonce is derived from the receiver's own counter; the
// explicit copy only lets the receiver tell a reordered or replayed frame
// from a tampered one before it tries to decrypt.
const seqSize = 8

// FrameOverhead is what sealing adds to a plaintext.
const FrameOverhead = seqSize + 16

// The suite: DHKEM(X25519, HKDF-SHA256) is implied by the X25519 keys
// passed to hpke.NewDHKEMPublicKey / NewDHKEMPrivateKey.
var (
	suiteKDF  = hpke.HKDFSHA256()
	suiteAEAD = hpke.AES256GCM()
)

// DialParams describe the header of a new stream.
type DialParams struct {
	Type uint32        // message type of the stream's first message
	TTL  time.Duration // how long the header stays valid; DefaultEnvelopeTTL if 0, at most MaxEnvelopeTTL
	// Now and Rand are injectable for golden vectors; time.Now and
	// crypto/rand when nil. Rand supplies only the message ID; the HPKE
	// ephemeral key always comes from crypto/rand (tests make that
	// deterministic with testing/cryptotest).
	Now  func() time.Time
	Rand io.Reader
	// Session (protocol 1.2): open the stream in the envelope session this
	// identity holds with the recipient, or, when it holds none, offer to
	// set one up. Only for a stream whose opener reads the responder's
	// answer: the answer carries the ack that confirms a session, or the
	// reject that reports a stale one (see Initiator.Control).
	Session bool
}

// Initiator is the opening side of a stream.
type Initiator struct {
	sender *hpke.Sender // setup stream: frames out through the HPKE context
	fwd    cipher.AEAD  // session stream: frames out with a derived key
	back   cipher.AEAD
	aad    []byte
	header Header
	sendSeq,
	recvSeq uint64
	sendNonce,
	recvNonce [12]byte

	tab     *sessionTable
	to      peer.ID
	offer   *pendingOffer // this setup stream offered a session
	session *outSession   // this stream runs in a session
	settled bool          // the responder's first frame has come
	now     func() time.Time
}

// Dial starts a stream from id to the peer to, returning the initiator state
// and the Hello frame to send first.
func Dial(id *Identity, to peer.ID, p DialParams) (*Initiator, []byte, error) {
	p, err := p.defaults()
	if err != nil {
		return nil, nil, err
	}
	if p.Session {
		if s := id.sessions.outbound(to, p.Now()); s != nil {
			if n, ok := s.take(p.Now()); ok {
				return dialSession(id, to, s, n, p)
			}
			id.sessions.dropOut(to, s)
		}
	}
	pub, err := EnvelopePublicKey(to)
	if err != nil {
		return nil, nil, err
	}
	return dialKey(id, to, pub, p)
}

func (p DialParams) defaults() (DialParams, error) {
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.TTL <= 0 {
		p.TTL = DefaultEnvelopeTTL
	}
	if p.TTL > MaxEnvelopeTTL {
		// Receivers would refuse the header; fail here, where the cause is.
		return p, fmt.Errorf("%w: TTL %s, at most %s", ErrLifetimeTooLong, p.TTL, MaxEnvelopeTTL)
	}
	if p.Rand == nil {
		p.Rand = rand.Reader
	}
	return p, nil
}

// header fills in the fields every header version shares.
func (p DialParams) header(version uint32, from, to peer.ID) (Header, error) {
	t := p.Now()
	h := Header{
		Version:   version,
		Type:      p.Type,
		Sender:    from,
		Recipient: to,
		IssuedAt:  t,
		ExpiresAt: t.Add(p.TTL),
	}
	if _, err := io.ReadFull(p.Rand, h.MessageID[:]); err != nil {
		return Header{}, fmt.Errorf("crypto: message id: %w", err)
	}
	return h, nil
}

// roundTimes gives h the millisecond times that went on the wire, so the
// Initiator's view equals what was sent.
func roundTimes(h *Header) {
	h.IssuedAt, h.ExpiresAt = time.UnixMilli(h.IssuedAt.UnixMilli()), time.UnixMilli(h.ExpiresAt.UnixMilli())
}

// dialSession opens stream number n of session s: no public-key operation.
func dialSession(id *Identity, to peer.ID, s *outSession, n uint64, p DialParams) (*Initiator, []byte, error) {
	h, err := p.header(SessionVersion, id.PeerID(), to)
	if err != nil {
		return nil, nil, err
	}
	h.SessionID, h.StreamSeq = s.id, n
	raw := h.Marshal()
	roundTimes(&h)
	fwd, back, err := s.streamKeys(raw)
	if err != nil {
		return nil, nil, err
	}
	hello := Hello{Header: raw, MAC: s.mac(raw)}
	return &Initiator{fwd: fwd, back: back, aad: raw, header: h, tab: id.sessions, to: to, session: s, now: p.Now}, hello.Marshal(), nil
}

func dialKey(id *Identity, to peer.ID, pub hpkePublicKey, p DialParams) (*Initiator, []byte, error) {
	p, err := p.defaults()
	if err != nil {
		return nil, nil, err
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("crypto: recipient key: %w", err)
	}
	enc, sender, err := hpke.NewSender(pk, suiteKDF, suiteAEAD, []byte(hpkeInfo))
	if err != nil {
		return nil, nil, fmt.Errorf("crypto: hpke setup: %w", err)
	}
	h, err := p.header(EnvelopeVersion, id.PeerID(), to)
	if err != nil {
		return nil, nil, err
	}
	h.Enc = enc
	offeredAt := h.IssuedAt
	h.SessionOffer = p.Session && id.sessions.mayOffer(to, offeredAt)
	raw := h.Marshal()
	roundTimes(&h)
	back, err := exportBackKey(sender.Export)
	if err != nil {
		return nil, nil, err
	}
	ini := &Initiator{sender: sender, back: back, aad: raw, header: h, tab: id.sessions, to: to, now: p.Now}
	if h.SessionOffer {
		keys, ack, err := deriveSession(h.MessageID, sender.Export)
		if err != nil {
			return nil, nil, err
		}
		ini.offer = &pendingOffer{keys: keys, ack: ack, sentAt: offeredAt}
	}
	hello := Hello{Header: raw, Signature: id.sign(signingInput(DomainEnvelopeHeader, raw))}
	return ini, hello.Marshal(), nil
}

// Header is the header this stream was opened with.
func (s *Initiator) Header() Header { return s.header }

// InSession reports whether the stream runs in an envelope session (and
// so may be answered by a reject frame).
func (s *Initiator) InSession() bool { return s.session != nil }

// Offered reports whether the stream offered a session (and so may be
// answered by an ack frame).
func (s *Initiator) Offered() bool { return s.offer != nil }

// Control takes a clear-text control frame that came from the responder
// before its first sealed frame (IsControlFrame). A valid ack of this
// stream's offer installs the session for later streams and returns nil. A
// reject of this stream's session drops the session and returns
// ErrSessionRejected: the stream must be set up again (Dial without that
// session), on the same byte stream, where the responder waits for it.
// Anything else is ErrControlFrame or, for a forged ack, ErrBadSignature.
func (s *Initiator) Control(frame []byte) error {
	if s.settled {
		return fmt.Errorf("%w: after the first sealed frame", ErrControlFrame)
	}
	switch {
	case len(frame) == AckSize && s.offer != nil:
		s.settled = true
		s.tab.settle(s.to, s.offer.sentAt)
		if !hmac.Equal(frame, s.offer.ack) {
			return fmt.Errorf("%w: session ack from %s", ErrBadSignature, s.to)
		}
		s.tab.putOut(s.to, &outSession{sessionKeys: s.offer.keys, useUntil: s.offer.sentAt.Add(SessionLifetime - sessionMargin)})
		return nil
	case len(frame) == 1 && frame[0] == rejectUnknown && s.session != nil:
		s.settled = true
		s.tab.dropOut(s.to, s.session)
		return fmt.Errorf("%w: session %s with %s", ErrSessionRejected, s.session.id, s.to)
	}
	return fmt.Errorf("%w: %d bytes", ErrControlFrame, len(frame))
}

// Settle tells the initiator that the responder's first sealed frame has
// come: an offer not acked before it never will be (the responder is older
// than protocol 1.2, or keeps no more sessions), and no control frame may
// follow.
func (s *Initiator) Settle() {
	if !s.settled && s.offer != nil {
		s.tab.settle(s.to, s.offer.sentAt)
	}
	s.settled = true
}

// Seal encrypts one opener→responder frame.
func (s *Initiator) Seal(plaintext []byte) ([]byte, error) { return s.AppendSeal(nil, plaintext) }

// AppendSeal appends one sealed opener→responder frame to dst, so a writer
// can build the wire frame (length prefix, then this) in one buffer. The
// plaintext may lie exactly where its ciphertext goes, at
// dst[len(dst)+8:] within dst's capacity: it is then sealed in place.
func (s *Initiator) AppendSeal(dst, plaintext []byte) ([]byte, error) {
	if s.fwd != nil {
		return sealDirect(s.fwd, s.aad, &s.sendSeq, &s.sendNonce, dst, plaintext)
	}
	if s.sendSeq == 1<<64-1 {
		return nil, ErrSequence
	}
	dst = binary.BigEndian.AppendUint64(dst, s.sendSeq)
	// hpke.Sender.Seal derives the nonce from its own counter, which moves
	// in lock step with sendSeq. It allocates the ciphertext itself; this
	// copy is the one price of using the standard library's HPKE context.
	ct, err := s.sender.Seal(s.aad, plaintext)
	if err != nil {
		return nil, fmt.Errorf("crypto: seal: %w", err)
	}
	s.sendSeq++
	return append(dst, ct...), nil
}

// Open decrypts one responder→opener frame.
func (s *Initiator) Open(frame []byte) ([]byte, error) {
	return openDirect(s.back, s.aad, &s.recvSeq, &s.recvNonce, frame, copyOut)
}

// OpenInPlace is Open that decrypts into the frame's own bytes: the
// plaintext it returns shares the frame's memory, and the frame is
// overwritten, also when it fails to authenticate.
func (s *Initiator) OpenInPlace(frame []byte) ([]byte, error) {
	return openDirect(s.back, s.aad, &s.recvSeq, &s.recvNonce, frame, inPlace)
}

// AcceptParams describe what a responder checks.
type AcceptParams struct {
	// Remote is the authenticated libp2p peer the stream came from.
	Remote peer.ID
	// Replay remembers message IDs; required.
	Replay ReplayCache
	// MaxSkew is how far in the future issued_at may be;
	// DefaultMaxSkew if 0.
	MaxSkew time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// Sessions (protocol 1.2): answer session offers with an ack (Ack) and
	// accept session streams. Without it Accept behaves as protocol 1.1
	// does: offers are ignored and session streams are ErrBadVersion.
	Sessions bool
}

// Responder is the accepting side of a stream.
type Responder struct {
	recipient *hpke.Recipient // setup stream: frames in through the HPKE context
	fwd       cipher.AEAD     // session stream: frames in with a derived key
	back      cipher.AEAD
	aad       []byte
	header    Header
	recvSeq,
	sendSeq uint64
	recvNonce,
	sendNonce [12]byte
	ack []byte
}

// Accept checks a Hello frame and sets up the responder side. The checks run
// in this order, before any decryption: shape, version, recipient is self,
// sender is the stream's remote peer, signature (or, on a session stream,
// the session and its MAC), time window and lifetime, replay.
//
// A session stream whose session this node does not hold is
// ErrSessionUnknown: answer it with RejectFrame and accept the full setup
// the opener sends next on the same byte stream.
func Accept(id *Identity, hello []byte, p AcceptParams) (*Responder, error) {
	if p.Replay == nil {
		return nil, errors.New("crypto: Accept needs a replay cache")
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	skew := p.MaxSkew
	if skew <= 0 {
		skew = DefaultMaxSkew
	}
	hl, err := ParseHello(hello)
	if err != nil {
		return nil, err
	}
	h, err := ParseHeader(hl.Header)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Version == SessionVersion && p.Sessions:
		if len(hl.MAC) == 0 {
			return nil, fmt.Errorf("%w: session stream hello without a mac", ErrMalformedHeader)
		}
		return acceptSession(id, hl, h, p, now(), skew)
	case h.Version != EnvelopeVersion:
		return nil, fmt.Errorf("%w: %d (this node speaks %d)", ErrBadVersion, h.Version, EnvelopeVersion)
	case len(hl.Signature) == 0:
		return nil, fmt.Errorf("%w: hello without a signature", ErrMalformedHeader)
	}
	if err := checkParties(id, h, p.Remote); err != nil {
		return nil, err
	}
	keys, err := cachedKeys(h.Sender)
	if err != nil {
		return nil, err
	}
	if len(hl.Signature) != ed25519.SignatureSize || !keys.v.verify(signingInput(DomainEnvelopeHeader, hl.Header), hl.Signature) {
		return nil, fmt.Errorf("%w: envelope header from %s", ErrBadSignature, h.Sender)
	}
	t := now()
	if err := checkTimes(h, t, skew); err != nil {
		return nil, err
	}
	priv, err := hpke.NewDHKEMPrivateKey(id.EnvelopeKey())
	if err != nil {
		return nil, fmt.Errorf("crypto: envelope key: %w", err)
	}
	recipient, err := hpke.NewRecipient(h.Enc, priv, suiteKDF, suiteAEAD, []byte(hpkeInfo))
	if err != nil {
		return nil, fmt.Errorf("%w: encapsulated key: %v", ErrTampered, err)
	}
	back, err := exportBackKey(recipient.Export)
	if err != nil {
		return nil, err
	}
	// Remember the message ID last: a header that fails any other check
	// must not burn its ID. The ID is kept until the header expires, after
	// which the time check above rejects it anyway.
	seen, err := p.Replay.CheckAndRemember(h.Sender, h.MessageID, h.ExpiresAt.Add(skew))
	if err != nil {
		return nil, fmt.Errorf("crypto: replay cache: %w", err)
	}
	if seen {
		return nil, fmt.Errorf("%w: message %s from %s", ErrReplayed, h.MessageID, h.Sender)
	}
	r := &Responder{recipient: recipient, back: back, aad: hl.Header, header: h}
	if h.SessionOffer && p.Sessions {
		keys, ack, err := deriveSession(h.MessageID, recipient.Export)
		if err != nil {
			return nil, err
		}
		s := &inSession{sessionKeys: keys, peer: h.Sender, created: t, expires: t.Add(SessionLifetime)}
		if id.sessions.putIn(s, t) {
			r.ack = ack
		}
	}
	return r, nil
}

// acceptSession checks a session stream's header: the parties, then the
// session and the MAC, then the times, and last the stream number, so that
// only an authentic stream uses up its number.
func acceptSession(id *Identity, hl Hello, h Header, p AcceptParams, t time.Time, skew time.Duration) (*Responder, error) {
	if err := checkParties(id, h, p.Remote); err != nil {
		return nil, err
	}
	s := id.sessions.inbound(p.Remote, h.SessionID, t)
	if s == nil {
		return nil, fmt.Errorf("%w: session %s from %s", ErrSessionUnknown, h.SessionID, h.Sender)
	}
	if !hmac.Equal(hl.MAC, s.mac(hl.Header)) {
		return nil, fmt.Errorf("%w: session stream header from %s", ErrBadSignature, h.Sender)
	}
	if err := checkTimes(h, t, skew); err != nil {
		return nil, err
	}
	if h.StreamSeq == 0 {
		return nil, fmt.Errorf("%w: stream number 0", ErrMalformedHeader)
	}
	if err := s.admit(h.StreamSeq); err != nil {
		return nil, err
	}
	fwd, back, err := s.streamKeys(hl.Header)
	if err != nil {
		return nil, err
	}
	return &Responder{fwd: fwd, back: back, aad: hl.Header, header: h}, nil
}

// checkParties: the header is addressed to id and comes from the stream's
// remote peer.
func checkParties(id *Identity, h Header, remote peer.ID) error {
	if h.Recipient != id.PeerID() {
		return fmt.Errorf("%w: header names %s", ErrWrongRecipient, h.Recipient)
	}
	if h.Sender != remote {
		return fmt.Errorf("%w: header names %s, stream is from %s", ErrSenderMismatch, h.Sender, remote)
	}
	return nil
}

// checkTimes: the header is not from the future, not expired, and asks for
// no longer a life than MaxEnvelopeTTL plus skew.
func checkTimes(h Header, t time.Time, skew time.Duration) error {
	if h.IssuedAt.After(t.Add(skew)) {
		return fmt.Errorf("%w: issued %s, now %s, skew allowed %s", ErrFromFuture, h.IssuedAt.UTC(), t.UTC(), skew)
	}
	if !t.Before(h.ExpiresAt) {
		return fmt.Errorf("%w: at %s", ErrExpired, h.ExpiresAt.UTC())
	}
	if !h.ExpiresAt.After(h.IssuedAt) {
		return fmt.Errorf("%w: expires before it was issued", ErrExpired)
	}
	if life := h.ExpiresAt.Sub(h.IssuedAt); life > MaxEnvelopeTTL+skew {
		return fmt.Errorf("%w: %s from issued_at to expires_at, at most %s (TTL %s + skew %s)",
			ErrLifetimeTooLong, life, MaxEnvelopeTTL+skew, MaxEnvelopeTTL, skew)
	}
	return nil
}

// Ack is the control frame to send, in the clear, before the first sealed
// frame: the session ack when this setup stream's offer was taken, else nil.
func (r *Responder) Ack() []byte { return r.ack }

// Header is the verified header of the stream.
func (r *Responder) Header() Header { return r.header }

// Open decrypts one opener→responder frame.
func (r *Responder) Open(frame []byte) ([]byte, error) {
	if r.fwd != nil {
		return openDirect(r.fwd, r.aad, &r.recvSeq, &r.recvNonce, frame, copyOut)
	}
	return r.openHPKE(frame)
}

// OpenInPlace is Open that decrypts into the frame's own bytes where it can
// (always on a session stream): the plaintext may share the frame's
// memory, and the frame is overwritten.
func (r *Responder) OpenInPlace(frame []byte) ([]byte, error) {
	if r.fwd != nil {
		return openDirect(r.fwd, r.aad, &r.recvSeq, &r.recvNonce, frame, inPlace)
	}
	return r.openHPKE(frame)
}

func (r *Responder) openHPKE(frame []byte) ([]byte, error) {
	seq, ct, err := splitFrame(frame, r.recvSeq)
	if err != nil {
		return nil, err
	}
	_ = seq
	pt, err := r.recipient.Open(r.aad, ct)
	if err != nil {
		return nil, fmt.Errorf("%w: frame %d", ErrTampered, r.recvSeq)
	}
	r.recvSeq++
	return pt, nil
}

// Seal encrypts one responder→opener frame.
func (r *Responder) Seal(plaintext []byte) ([]byte, error) { return r.AppendSeal(nil, plaintext) }

// AppendSeal appends one sealed responder→opener frame to dst; like
// Initiator.AppendSeal, it seals in place a plaintext at dst[len(dst)+8:].
func (r *Responder) AppendSeal(dst, plaintext []byte) ([]byte, error) {
	return sealDirect(r.back, r.aad, &r.sendSeq, &r.sendNonce, dst, plaintext)
}

func exportBackKey(export func(string, int) ([]byte, error)) (cipher.AEAD, error) {
	key, err := export(responderExportLabel, 32)
	if err != nil {
		return nil, fmt.Errorf("crypto: export responder key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("crypto: responder cipher: %w", err)
	}
	return cipher.NewGCM(block)
}

// splitFrame checks the explicit sequence number against the expected one.
func splitFrame(frame []byte, want uint64) (uint64, []byte, error) {
	if len(frame) < FrameOverhead {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrFrameTooShort, len(frame))
	}
	seq := binary.BigEndian.Uint64(frame)
	switch {
	case seq < want:
		return 0, nil, fmt.Errorf("%w: frame %d, already at %d", ErrReplayed, seq, want)
	case seq > want:
		return 0, nil, fmt.Errorf("%w: frame %d, expected %d", ErrOutOfOrder, seq, want)
	}
	return seq, frame[seqSize:], nil
}

func sealDirect(aead cipher.AEAD, aad []byte, seq *uint64, nonce *[12]byte, dst, plaintext []byte) ([]byte, error) {
	if *seq == 1<<64-1 {
		return nil, ErrSequence
	}
	if dst == nil {
		dst = make([]byte, 0, seqSize+len(plaintext)+aead.Overhead())
	}
	dst = binary.BigEndian.AppendUint64(dst, *seq)
	// The nonce lives in the stream state: a local array would escape to
	// the heap through the AEAD interface, one allocation a frame.
	binary.BigEndian.PutUint64(nonce[4:], *seq)
	dst = aead.Seal(dst, nonce[:], plaintext, aad)
	*seq++
	return dst, nil
}

// Whether openDirect decrypts a frame over its own ciphertext.
const (
	inPlace = true
	copyOut = false
)

func openDirect(aead cipher.AEAD, aad []byte, want *uint64, nonce *[12]byte, frame []byte, overwrite bool) ([]byte, error) {
	seq, ct, err := splitFrame(frame, *want)
	if err != nil {
		return nil, err
	}
	var dst []byte
	if overwrite {
		dst = ct[:0]
	}
	binary.BigEndian.PutUint64(nonce[4:], seq)
	pt, err := aead.Open(dst, nonce[:], ct, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: frame %d", ErrTampered, seq)
	}
	*want++
	return pt, nil
}
