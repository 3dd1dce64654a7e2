package crypto

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
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
}

// Initiator is the opening side of a stream.
type Initiator struct {
	sender *hpke.Sender
	back   cipher.AEAD
	aad    []byte
	header Header
	sendSeq,
	recvSeq uint64
}

// Dial starts a stream from id to the peer to, returning the initiator state
// and the Hello frame to send first.
func Dial(id *Identity, to peer.ID, p DialParams) (*Initiator, []byte, error) {
	pub, err := EnvelopePublicKey(to)
	if err != nil {
		return nil, nil, err
	}
	return dialKey(id, to, pub, p)
}

func dialKey(id *Identity, to peer.ID, pub hpkePublicKey, p DialParams) (*Initiator, []byte, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	ttl := p.TTL
	if ttl <= 0 {
		ttl = DefaultEnvelopeTTL
	}
	if ttl > MaxEnvelopeTTL {
		// Receivers would refuse the header; fail here, where the cause is.
		return nil, nil, fmt.Errorf("%w: TTL %s, at most %s", ErrLifetimeTooLong, ttl, MaxEnvelopeTTL)
	}
	r := p.Rand
	if r == nil {
		r = rand.Reader
	}
	pk, err := hpke.NewDHKEMPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("crypto: recipient key: %w", err)
	}
	enc, sender, err := hpke.NewSender(pk, suiteKDF, suiteAEAD, []byte(hpkeInfo))
	if err != nil {
		return nil, nil, fmt.Errorf("crypto: hpke setup: %w", err)
	}
	t := now()
	h := Header{
		Version:   EnvelopeVersion,
		Type:      p.Type,
		Sender:    id.PeerID(),
		Recipient: to,
		IssuedAt:  t,
		ExpiresAt: t.Add(ttl),
		Enc:       enc,
	}
	if _, err := io.ReadFull(r, h.MessageID[:]); err != nil {
		return nil, nil, fmt.Errorf("crypto: message id: %w", err)
	}
	raw := h.Marshal()
	// Round-trip the times so the Initiator's view equals what was sent.
	h.IssuedAt, h.ExpiresAt = time.UnixMilli(h.IssuedAt.UnixMilli()), time.UnixMilli(h.ExpiresAt.UnixMilli())
	back, err := exportBackKey(sender.Export)
	if err != nil {
		return nil, nil, err
	}
	hello := Hello{Header: raw, Signature: id.sign(signingInput(DomainEnvelopeHeader, raw))}
	return &Initiator{sender: sender, back: back, aad: raw, header: h}, hello.Marshal(), nil
}

// Header is the header this stream was opened with.
func (s *Initiator) Header() Header { return s.header }

// Seal encrypts one opener→responder frame.
func (s *Initiator) Seal(plaintext []byte) ([]byte, error) { return s.AppendSeal(nil, plaintext) }

// AppendSeal appends one sealed opener→responder frame to dst, so a writer
// can build the wire frame (length prefix, then this) in one buffer.
func (s *Initiator) AppendSeal(dst, plaintext []byte) ([]byte, error) {
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
	return openDirect(s.back, s.aad, &s.recvSeq, frame)
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
}

// Responder is the accepting side of a stream.
type Responder struct {
	recipient *hpke.Recipient
	back      cipher.AEAD
	aad       []byte
	header    Header
	recvSeq,
	sendSeq uint64
}

// Accept checks a Hello frame and sets up the responder side. The checks run
// in this order, before any decryption: shape, version, recipient is self,
// sender is the stream's remote peer, signature, time window and lifetime,
// replay.
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
	if h.Version != EnvelopeVersion {
		return nil, fmt.Errorf("%w: %d (this node speaks %d)", ErrBadVersion, h.Version, EnvelopeVersion)
	}
	if h.Recipient != id.PeerID() {
		return nil, fmt.Errorf("%w: header names %s", ErrWrongRecipient, h.Recipient)
	}
	if h.Sender != p.Remote {
		return nil, fmt.Errorf("%w: header names %s, stream is from %s", ErrSenderMismatch, h.Sender, p.Remote)
	}
	keys, err := cachedKeys(h.Sender)
	if err != nil {
		return nil, err
	}
	if len(hl.Signature) != ed25519.SignatureSize || !ed25519.Verify(keys.ed, signingInput(DomainEnvelopeHeader, hl.Header), hl.Signature) {
		return nil, fmt.Errorf("%w: envelope header from %s", ErrBadSignature, h.Sender)
	}
	t := now()
	if h.IssuedAt.After(t.Add(skew)) {
		return nil, fmt.Errorf("%w: issued %s, now %s, skew allowed %s", ErrFromFuture, h.IssuedAt.UTC(), t.UTC(), skew)
	}
	if !t.Before(h.ExpiresAt) {
		return nil, fmt.Errorf("%w: at %s", ErrExpired, h.ExpiresAt.UTC())
	}
	if !h.ExpiresAt.After(h.IssuedAt) {
		return nil, fmt.Errorf("%w: expires before it was issued", ErrExpired)
	}
	if life := h.ExpiresAt.Sub(h.IssuedAt); life > MaxEnvelopeTTL+skew {
		return nil, fmt.Errorf("%w: %s from issued_at to expires_at, at most %s (TTL %s + skew %s)",
			ErrLifetimeTooLong, life, MaxEnvelopeTTL+skew, MaxEnvelopeTTL, skew)
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
	return &Responder{recipient: recipient, back: back, aad: hl.Header, header: h}, nil
}

// Header is the verified header of the stream.
func (r *Responder) Header() Header { return r.header }

// Open decrypts one opener→responder frame.
func (r *Responder) Open(frame []byte) ([]byte, error) {
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

// AppendSeal appends one sealed responder→opener frame to dst.
func (r *Responder) AppendSeal(dst, plaintext []byte) ([]byte, error) {
	return sealDirect(r.back, r.aad, &r.sendSeq, dst, plaintext)
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

func seqNonce(seq uint64) []byte {
	var n [12]byte
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

func sealDirect(aead cipher.AEAD, aad []byte, seq *uint64, dst, plaintext []byte) ([]byte, error) {
	if *seq == 1<<64-1 {
		return nil, ErrSequence
	}
	if dst == nil {
		dst = make([]byte, 0, seqSize+len(plaintext)+aead.Overhead())
	}
	dst = binary.BigEndian.AppendUint64(dst, *seq)
	dst = aead.Seal(dst, seqNonce(*seq), plaintext, aad)
	*seq++
	return dst, nil
}

func openDirect(aead cipher.AEAD, aad []byte, want *uint64, frame []byte) ([]byte, error) {
	seq, ct, err := splitFrame(frame, *want)
	if err != nil {
		return nil, err
	}
	pt, err := aead.Open(nil, seqNonce(seq), ct, aad)
	if err != nil {
		return nil, fmt.Errorf("%w: frame %d", ErrTampered, seq)
	}
	*want++
	return pt, nil
}
