package protocol

// Opening a Conn: the opener's Hello and first message (Dial), the
// responder's checks before it decrypts anything (Accept), and the
// envelope-session reject and the full setup that follows it.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
)

// Dial opens the sealed stream from id to remote over s and sends first as
// its first message.
func Dial(s Stream, id *crypto.Identity, remote peer.ID, first Message, opts ConnOptions) (*Conn, error) {
	b, err := EncodeMessage(first)
	if err != nil {
		return nil, err
	}
	return DialEncoded(s, id, remote, first.Type(), b, opts)
}

// DialEncoded is Dial with the first message already encoded (a stored
// offer, resent byte for byte so that its hash stays the same).
//
// The Hello and the first message go out in one Write. Toward a peer this
// identity holds an envelope session with (protocol 1.2), the stream runs
// in it; otherwise it is set up in full and, where the first message gets
// an answer, offers a session for later streams.
func DialEncoded(s Stream, id *crypto.Identity, remote peer.ID, typ MessageType, first []byte, opts ConnOptions) (*Conn, error) {
	c := newConn(s, opts)
	c.id, c.remote, c.typ = id, remote, typ
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.start(); err != nil {
		return nil, err
	}
	if err := c.queue(first); err != nil {
		return nil, err
	}
	if err := c.flush(); err != nil {
		return nil, err
	}
	return c, nil
}

// answered reports whether a stream opened with a message of type t
// carries an answer back. Only such a stream may use or offer a session:
// the answer is where the responder acks an offer or rejects a stale
// session.
func answered(t MessageType) bool { return t != TypeDelegationCancel }

// start sets up the opener's envelope and queues the Hello; c.wmu is held.
func (c *Conn) start() error {
	ini, hello, err := crypto.Dial(c.id, c.remote, crypto.DialParams{
		Type: uint32(c.typ), TTL: c.opts.TTL, Now: c.opts.Now,
		Session: c.opts.sessions() && answered(c.typ),
	})
	if err != nil {
		return err
	}
	c.ini, c.header = ini, ini.Header()
	c.seal, c.open = ini.AppendSeal, ini.OpenInPlace
	c.confirmed = !ini.InSession()
	c.out = binary.AppendUvarint(c.out, uint64(len(hello)))
	c.out = append(c.out, hello...)
	return nil
}

// restart sets the stream up again in full after the responder rejected
// its session, and sends again what it had sent in the session; the
// responder skips the frames it could not open and waits for this Hello.
func (c *Conn) restart() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.restarts++
	if c.restarts > 1 {
		return fmt.Errorf("protocol: %w twice on one stream", crypto.ErrSessionRejected)
	}
	again := c.unconfirmed
	c.unconfirmed = nil
	if err := c.start(); err != nil {
		return err
	}
	for _, b := range again {
		if err := c.queue(b); err != nil {
			return err
		}
	}
	return c.flush()
}

// Accept reads the Hello and the first message of a stream that remote
// opened, checking the envelope (crypto.Accept) before decrypting anything.
// It returns the first message and its exact plaintext bytes.
//
// A stream in an envelope session this node does not hold (it restarted,
// or the session expired) is answered with a reject frame; the opener then
// sets the stream up in full on the same byte stream, and Accept goes on
// with that.
func Accept(s Stream, id *crypto.Identity, remote peer.ID, replay crypto.ReplayCache, opts ConnOptions) (*Conn, Message, []byte, error) {
	c := newConn(s, opts)
	// The Hello is read with its own small cap: nothing is decrypted, and
	// little is allocated, before the sender has been authenticated.
	hello, err := ReadFrameDeadline(NewFrameReader(s, crypto.MaxHelloSize), s, opts.ioTimeout())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("protocol: read hello: %w", err)
	}
	params := crypto.AcceptParams{Remote: remote, Replay: replay, MaxSkew: opts.MaxSkew, Now: opts.Now, Sessions: opts.sessions()}
	res, err := crypto.Accept(id, hello, params)
	if errors.Is(err, crypto.ErrSessionUnknown) {
		if hello, err = c.rejectSession(); err != nil {
			return nil, nil, nil, err
		}
		if res, err = crypto.Accept(id, hello, params); err == nil && res.Header().Version != crypto.EnvelopeVersion {
			err = fmt.Errorf("%w: a session stream again after the reject", crypto.ErrSessionUnknown)
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	c.header = res.Header()
	c.seal, c.open = res.AppendSeal, res.OpenInPlace
	c.confirmed = true
	if ack := res.Ack(); ack != nil {
		// Goes out in front of the first reply, in the same Write.
		c.out = binary.AppendUvarint(c.out, uint64(len(ack)))
		c.out = append(c.out, ack...)
	}
	first, raw, err := c.RecvRaw(opts.ioTimeout())
	if err != nil {
		return nil, nil, nil, err
	}
	if uint32(first.Type()) != c.header.Type {
		return nil, nil, nil, fmt.Errorf("%w: header says %d, got %s", ErrTypeMismatch, c.header.Type, first.Type())
	}
	return c, first, raw, nil
}

// maxRejectedFrames bounds the sealed frames a responder skips after a
// reject: the largest message the opener may have sent in the session,
// in chunks, and a frame to spare.
const maxRejectedFrames = MaxMessage/ChunkSize + 2

// rejectSession answers a stream whose session this node does not hold,
// skips the sealed frames the opener sent in it, and returns the Hello of
// the full setup that follows.
func (c *Conn) rejectSession() ([]byte, error) {
	reject := crypto.RejectFrame()
	frame := binary.AppendUvarint(nil, uint64(len(reject)))
	if err := c.write(append(frame, reject...)); err != nil {
		return nil, fmt.Errorf("protocol: send session reject: %w", err)
	}
	// What the opener may have sent in the session: its messages, in
	// chunks of at most ChunkSize plus their encoding and sealing.
	budget := uint64(MaxMessage + maxRejectedFrames*(crypto.FrameOverhead+32))
	for range maxRejectedFrames {
		if err := c.s.SetReadDeadline(time.Now().Add(c.opts.ioTimeout())); err != nil {
			return nil, fmt.Errorf("protocol: set read deadline: %w", err)
		}
		n, err := c.fr.readLength()
		if err != nil {
			return nil, fmt.Errorf("protocol: read after session reject: %w", err)
		}
		if n > uint64(c.fr.Max()) {
			return nil, fmt.Errorf("%w: %d bytes declared, cap %d", ErrFrameTooLarge, n, c.fr.Max())
		}
		if n > budget {
			return nil, fmt.Errorf("%w: more than a message's worth of frames after a session reject", ErrPayloadTooLarge)
		}
		budget -= n
		if n > crypto.MaxHelloSize {
			if _, err := io.CopyN(io.Discard, c.s, int64(n)); err != nil {
				return nil, fmt.Errorf("protocol: skip rejected frame: %w", err)
			}
			continue
		}
		b, err := c.fr.readBody(int(n))
		if err != nil {
			return nil, fmt.Errorf("protocol: read after session reject: %w", err)
		}
		// A sealed frame starts with its sequence number, whose first
		// byte is 0 for any stream shorter than 2^56 frames; a Hello
		// starts with the tag of its header field.
		if len(b) > 0 && b[0] != 0 {
			return b, nil
		}
	}
	return nil, invalid("hello", "no full setup within %d frames of a session reject", maxRejectedFrames)
}
