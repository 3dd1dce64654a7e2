package crypto

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformedHeader reports a Hello or envelope header that does not parse.
var ErrMalformedHeader = errors.New("crypto: malformed envelope header")

// MaxHelloSize caps the clear-text Hello frame. A header holds two peer IDs,
// a message ID, two timestamps and a 32-byte encapsulated key; 1 KiB is
// generous.
const MaxHelloSize = 1024

// Header is the clear-text header that opens every stream. Its encoded bytes
// are signed by the sender and are the AAD of every frame on the stream.
//
// The encoding is the protobuf message kith.v1.EnvelopeHeader (see
// protocol/pb/kith.proto), written by hand here so that crypto needs no
// generated code; a protocol test checks the two agree.
type Header struct {
	Version   uint32
	Type      uint32
	Sender    peer.ID
	Recipient peer.ID
	MessageID MessageID
	IssuedAt  time.Time // millisecond precision on the wire
	ExpiresAt time.Time
	Enc       []byte // HPKE encapsulated key; version 1 only

	// SessionOffer (version 1): the opener offers to keep this stream's
	// HPKE context as an envelope session (protocol 1.2).
	SessionOffer bool
	// SessionID and StreamSeq (version 2): the session this stream belongs
	// to and the stream's number in it.
	SessionID MessageID
	StreamSeq uint64
}

// Field numbers of kith.v1.EnvelopeHeader and kith.v1.Hello.
const (
	hdrVersion   = 1
	hdrType      = 2
	hdrSender    = 3
	hdrRecipient = 4
	hdrMessageID = 5
	hdrIssuedAt  = 6
	hdrExpiresAt = 7
	hdrEnc       = 8
	hdrOffer     = 9
	hdrSession   = 10
	hdrStreamSeq = 11

	helloHeader    = 1
	helloSignature = 2
	helloMAC       = 3
)

// Marshal encodes h in canonical field order. A version 2 (session stream)
// header has no enc and carries session_id and stream_seq; a version 1
// header carries enc and, when set, session_offer.
func (h Header) Marshal() []byte {
	b := make([]byte, 0, 160)
	b = protowire.AppendTag(b, hdrVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.Version))
	b = protowire.AppendTag(b, hdrType, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.Type))
	b = protowire.AppendTag(b, hdrSender, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte(h.Sender))
	b = protowire.AppendTag(b, hdrRecipient, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte(h.Recipient))
	b = protowire.AppendTag(b, hdrMessageID, protowire.BytesType)
	b = protowire.AppendBytes(b, h.MessageID[:])
	b = protowire.AppendTag(b, hdrIssuedAt, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.IssuedAt.UnixMilli()))
	b = protowire.AppendTag(b, hdrExpiresAt, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(h.ExpiresAt.UnixMilli()))
	if h.Version == SessionVersion {
		b = protowire.AppendTag(b, hdrSession, protowire.BytesType)
		b = protowire.AppendBytes(b, h.SessionID[:])
		b = protowire.AppendTag(b, hdrStreamSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, h.StreamSeq)
		return b
	}
	b = protowire.AppendTag(b, hdrEnc, protowire.BytesType)
	b = protowire.AppendBytes(b, h.Enc)
	if h.SessionOffer {
		b = protowire.AppendTag(b, hdrOffer, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

// ParseHeader decodes an encoded header. Unknown fields are skipped (the
// signature covers them anyway); every known field must appear at most once
// and have its expected wire type.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	var seen uint16
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Header{}, fmt.Errorf("%w: tag: %v", ErrMalformedHeader, protowire.ParseError(n))
		}
		b = b[n:]
		if num >= hdrVersion && num <= hdrStreamSeq {
			if seen&(1<<num) != 0 {
				return Header{}, fmt.Errorf("%w: field %d repeated", ErrMalformedHeader, num)
			}
			seen |= 1 << num
		}
		switch num {
		case hdrVersion, hdrType, hdrIssuedAt, hdrExpiresAt, hdrOffer, hdrStreamSeq:
			if typ != protowire.VarintType {
				return Header{}, fmt.Errorf("%w: field %d wire type %d", ErrMalformedHeader, num, typ)
			}
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return Header{}, fmt.Errorf("%w: field %d: %v", ErrMalformedHeader, num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case hdrVersion:
				if v > 1<<32-1 {
					return Header{}, fmt.Errorf("%w: version overflows", ErrMalformedHeader)
				}
				h.Version = uint32(v)
			case hdrType:
				if v > 1<<32-1 {
					return Header{}, fmt.Errorf("%w: type overflows", ErrMalformedHeader)
				}
				h.Type = uint32(v)
			case hdrIssuedAt:
				h.IssuedAt = time.UnixMilli(int64(v))
			case hdrExpiresAt:
				h.ExpiresAt = time.UnixMilli(int64(v))
			case hdrOffer:
				if v > 1 {
					return Header{}, fmt.Errorf("%w: session_offer is %d", ErrMalformedHeader, v)
				}
				h.SessionOffer = v == 1
			case hdrStreamSeq:
				h.StreamSeq = v
			}
		case hdrSender, hdrRecipient, hdrMessageID, hdrEnc, hdrSession:
			if typ != protowire.BytesType {
				return Header{}, fmt.Errorf("%w: field %d wire type %d", ErrMalformedHeader, num, typ)
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Header{}, fmt.Errorf("%w: field %d: %v", ErrMalformedHeader, num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case hdrSender, hdrRecipient:
				id, err := peer.IDFromBytes(v)
				if err != nil {
					return Header{}, fmt.Errorf("%w: field %d: peer id: %v", ErrMalformedHeader, num, err)
				}
				if num == hdrSender {
					h.Sender = id
				} else {
					h.Recipient = id
				}
			case hdrMessageID:
				if len(v) != len(h.MessageID) {
					return Header{}, fmt.Errorf("%w: message id has %d bytes", ErrMalformedHeader, len(v))
				}
				copy(h.MessageID[:], v)
			case hdrSession:
				if len(v) != len(h.SessionID) {
					return Header{}, fmt.Errorf("%w: session id has %d bytes", ErrMalformedHeader, len(v))
				}
				copy(h.SessionID[:], v)
			case hdrEnc:
				h.Enc = append([]byte(nil), v...)
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Header{}, fmt.Errorf("%w: field %d: %v", ErrMalformedHeader, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	// The fields a header must have, and those it must not, follow from
	// its version: a session stream has no encapsulated key and a setup
	// stream names no session. Other versions are refused later, by
	// version, with ErrBadVersion; until then they are read as a setup
	// header, so they name no session either (Marshal writes the session
	// fields of a version 2 header only).
	need := []protowire.Number{hdrSender, hdrRecipient, hdrMessageID, hdrIssuedAt, hdrExpiresAt, hdrEnc}
	var forbid []protowire.Number
	switch h.Version {
	case SessionVersion:
		need = []protowire.Number{hdrSender, hdrRecipient, hdrMessageID, hdrIssuedAt, hdrExpiresAt, hdrSession, hdrStreamSeq}
		forbid = []protowire.Number{hdrEnc, hdrOffer}
	default:
		forbid = []protowire.Number{hdrSession, hdrStreamSeq}
	}
	for _, f := range need {
		if seen&(1<<f) == 0 {
			return Header{}, fmt.Errorf("%w: field %d missing", ErrMalformedHeader, f)
		}
	}
	for _, f := range forbid {
		if seen&(1<<f) != 0 {
			return Header{}, fmt.Errorf("%w: field %d not allowed in a version %d header", ErrMalformedHeader, f, h.Version)
		}
	}
	return h, nil
}

// Hello is the first, clear-text frame of a stream: the encoded header and
// the sender's signature over exactly those bytes, or, for a session stream
// (header version 2), a MAC under the session's hello key instead.
type Hello struct {
	Header    []byte
	Signature []byte
	MAC       []byte
}

// Marshal encodes the Hello (kith.v1.Hello).
func (h Hello) Marshal() []byte {
	b := make([]byte, 0, len(h.Header)+len(h.Signature)+len(h.MAC)+8)
	b = protowire.AppendTag(b, helloHeader, protowire.BytesType)
	b = protowire.AppendBytes(b, h.Header)
	if h.Signature != nil {
		b = protowire.AppendTag(b, helloSignature, protowire.BytesType)
		b = protowire.AppendBytes(b, h.Signature)
	}
	if h.MAC != nil {
		b = protowire.AppendTag(b, helloMAC, protowire.BytesType)
		b = protowire.AppendBytes(b, h.MAC)
	}
	return b
}

// ParseHello decodes a Hello frame without checking anything but its shape:
// a header and exactly one of signature and MAC.
func ParseHello(b []byte) (Hello, error) {
	if len(b) > MaxHelloSize {
		return Hello{}, fmt.Errorf("%w: hello is %d bytes, cap %d", ErrMalformedHeader, len(b), MaxHelloSize)
	}
	var h Hello
	var gotHeader, gotSig, gotMAC bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Hello{}, fmt.Errorf("%w: hello tag: %v", ErrMalformedHeader, protowire.ParseError(n))
		}
		b = b[n:]
		if (num == helloHeader || num == helloSignature || num == helloMAC) && typ != protowire.BytesType {
			return Hello{}, fmt.Errorf("%w: hello field %d wire type %d", ErrMalformedHeader, num, typ)
		}
		switch num {
		case helloHeader, helloSignature, helloMAC:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return Hello{}, fmt.Errorf("%w: hello field %d: %v", ErrMalformedHeader, num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case helloHeader:
				if gotHeader {
					return Hello{}, fmt.Errorf("%w: hello header repeated", ErrMalformedHeader)
				}
				gotHeader, h.Header = true, v
			case helloSignature:
				if gotSig {
					return Hello{}, fmt.Errorf("%w: hello signature repeated", ErrMalformedHeader)
				}
				gotSig, h.Signature = true, v
			case helloMAC:
				if gotMAC {
					return Hello{}, fmt.Errorf("%w: hello mac repeated", ErrMalformedHeader)
				}
				gotMAC, h.MAC = true, v
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return Hello{}, fmt.Errorf("%w: hello field %d: %v", ErrMalformedHeader, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	if !gotHeader || gotSig == gotMAC {
		return Hello{}, fmt.Errorf("%w: hello needs a header and exactly one of signature and mac", ErrMalformedHeader)
	}
	return h, nil
}
