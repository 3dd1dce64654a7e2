package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"golang.org/x/sync/semaphore"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// Stream is the byte stream a Conn runs over: a libp2p stream in a node, a
// net.Pipe end in tests.
type Stream interface {
	io.Reader
	io.Writer
	Deadliner
}

// ErrTypeMismatch: the first message of a stream is not the type its
// signed header announced.
var ErrTypeMismatch = errors.New("protocol: first message does not match header type")

// DefaultIOTimeout bounds every single frame read or write on a stream
// unless the caller gives its own.
const DefaultIOTimeout = 30 * time.Second

// ConnOptions tune a Conn. The zero value is usable.
type ConnOptions struct {
	MaxFrame int // DefaultMaxFrame if 0
	// MaxMessage caps one message joined from chunks; MaxMessage if 0.
	MaxMessage int
	IOTimeout  time.Duration // DefaultIOTimeout if 0; bounds each frame write and the Hello read
	TTL        time.Duration // envelope header lifetime (opener); crypto.DefaultEnvelopeTTL if 0
	MaxSkew    time.Duration // crypto.DefaultMaxSkew if 0
	Now        func() time.Time
}

func (o ConnOptions) ioTimeout() time.Duration {
	if o.IOTimeout <= 0 {
		return DefaultIOTimeout
	}
	return o.IOTimeout
}

// Conn is one sealed stream: a clear-text Hello, then sealed frames, each
// the encoding of one Message. One goroutine may Recv while others Send;
// Sends are serialized.
type Conn struct {
	s      Stream
	fr     *FrameReader
	fw     *FrameWriter
	opts   ConnOptions
	header crypto.Header

	wmu  sync.Mutex
	wbuf []byte
	seal func(dst, plaintext []byte) ([]byte, error)
	open func([]byte) ([]byte, error)
}

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
func DialEncoded(s Stream, id *crypto.Identity, remote peer.ID, typ MessageType, first []byte, opts ConnOptions) (*Conn, error) {
	ini, hello, err := crypto.Dial(id, remote, crypto.DialParams{Type: uint32(typ), TTL: opts.TTL, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	c := newConn(s, opts)
	c.header = ini.Header()
	c.seal, c.open = ini.AppendSeal, ini.Open
	if err := WriteFrameDeadline(c.fw, s, opts.ioTimeout(), hello); err != nil {
		return nil, fmt.Errorf("protocol: send hello: %w", err)
	}
	if err := c.SendEncoded(first); err != nil {
		return nil, err
	}
	return c, nil
}

// Accept reads the Hello and the first message of a stream that remote
// opened, checking the envelope (crypto.Accept) before decrypting anything.
// It returns the first message and its exact plaintext bytes.
func Accept(s Stream, id *crypto.Identity, remote peer.ID, replay crypto.ReplayCache, opts ConnOptions) (*Conn, Message, []byte, error) {
	c := newConn(s, opts)
	// The Hello is read with its own small cap: nothing is decrypted, and
	// little is allocated, before the sender has been authenticated.
	hello, err := ReadFrameDeadline(NewFrameReader(s, crypto.MaxHelloSize), s, opts.ioTimeout())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("protocol: read hello: %w", err)
	}
	res, err := crypto.Accept(id, hello, crypto.AcceptParams{Remote: remote, Replay: replay, MaxSkew: opts.MaxSkew, Now: opts.Now})
	if err != nil {
		return nil, nil, nil, err
	}
	c.header = res.Header()
	c.seal, c.open = res.AppendSeal, res.Open
	first, raw, err := c.RecvRaw(opts.ioTimeout())
	if err != nil {
		return nil, nil, nil, err
	}
	if uint32(first.Type()) != c.header.Type {
		return nil, nil, nil, fmt.Errorf("%w: header says %d, got %s", ErrTypeMismatch, c.header.Type, first.Type())
	}
	return c, first, raw, nil
}

func newConn(s Stream, opts ConnOptions) *Conn {
	return &Conn{
		s:    s,
		fr:   NewFrameReader(s, opts.MaxFrame),
		fw:   NewFrameWriter(s, opts.MaxFrame),
		opts: opts,
	}
}

// IOTimeout is the bound on each frame write (and the default for reads).
func (c *Conn) IOTimeout() time.Duration { return c.opts.ioTimeout() }

// Header is the stream's verified envelope header.
func (c *Conn) Header() crypto.Header { return c.header }

// Send seals and writes one message, bounded by the I/O timeout.
func (c *Conn) Send(m Message) error {
	b, err := EncodeMessage(m)
	if err != nil {
		return err
	}
	return c.SendEncoded(b)
}

// SendEncoded seals and writes an already encoded message (a stored one,
// resent byte for byte). A message larger than ChunkSize goes out as
// consecutive chunk frames, none of them larger than about ChunkSize.
func (c *Conn) SendEncoded(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(b) <= ChunkSize {
		return c.sendFrame(b)
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("%w: %d-byte message, limit %d", ErrPayloadTooLarge, len(b), MaxMessage)
	}
	for off := 0; off < len(b); off += ChunkSize {
		ch := &pb.Chunk{Data: b[off:min(off+ChunkSize, len(b))]}
		if off == 0 {
			ch.TotalSize = uint64(len(b))
		}
		f, err := marshal(&pb.Message{Body: &pb.Message_Chunk{Chunk: ch}})
		if err != nil {
			return err
		}
		if err := c.sendFrame(f); err != nil {
			return err
		}
	}
	return nil
}

// sendFrame seals b into one frame and writes it; c.wmu is held.
func (c *Conn) sendFrame(b []byte) error {
	// The frame (length prefix, sequence number, ciphertext) is sealed
	// straight into one buffer and written with one Write: no extra copy of
	// a large message, and a muxer sends it as one data frame.
	n := len(b) + crypto.FrameOverhead
	if n > c.fw.Max() {
		return fmt.Errorf("%w: %d-byte message seals to %d bytes, cap %d", ErrFrameTooLarge, len(b), n, c.fw.Max())
	}
	frame := binary.AppendUvarint(c.wbuf[:0], uint64(n))
	frame, err := c.seal(frame, b)
	if err != nil {
		return err
	}
	if cap(frame) <= 64<<10 {
		c.wbuf = frame[:0] // reuse small buffers; do not pin large ones
	}
	if err := c.s.SetWriteDeadline(time.Now().Add(c.opts.ioTimeout())); err != nil {
		return fmt.Errorf("protocol: set write deadline: %w", err)
	}
	_, err = c.s.Write(frame)
	return err
}

// Recv reads, opens and decodes the next message, waiting at most timeout.
func (c *Conn) Recv(timeout time.Duration) (Message, error) {
	m, _, err := c.RecvRaw(timeout)
	return m, err
}

// RecvRaw is Recv that also returns the message's plaintext encoding, for
// transcripts and the event log. A chunked message is joined first: the
// first frame waits up to timeout, each further chunk up to the I/O
// timeout, and the plaintext returned is the whole encoding, as if it had
// come in one frame.
func (c *Conn) RecvRaw(timeout time.Duration) (Message, []byte, error) {
	pt, err := c.recvFrame(timeout)
	if err != nil {
		return nil, nil, err
	}
	var w pb.Message
	if err := unmarshal("message", pt, &w); err != nil {
		return nil, nil, err
	}
	if ch, ok := w.GetBody().(*pb.Message_Chunk); ok {
		next := func() ([]byte, error) { return c.recvFrame(c.opts.ioTimeout()) }
		if pt, err = joinChunks(ch.Chunk, c.opts.MaxMessage, next, joinBudget); err != nil {
			return nil, nil, err
		}
		w.Reset()
		if err := unmarshal("message", pt, &w); err != nil {
			return nil, nil, err
		}
	}
	m, err := messageFromWire(&w)
	if err != nil {
		return nil, nil, err
	}
	return m, pt, nil
}

func (c *Conn) recvFrame(timeout time.Duration) ([]byte, error) {
	f, err := ReadFrameDeadline(c.fr, c.s, timeout)
	if err != nil {
		return nil, err
	}
	return c.open(f)
}

// joinBudget bounds the bytes that all the chunked messages being joined in
// this process hold at once: enough for several of the largest messages,
// and no more however many streams peers open. A join takes from it as
// bytes arrive, so holding a share costs a peer the bandwidth to send it.
var joinBudget = semaphore.NewWeighted(JoinBudget)

// JoinBudget is the most memory, in bytes, that chunked messages being
// joined may hold at once in one process; a join that would go past it
// ends its stream with ErrPayloadTooLarge.
const JoinBudget = 4 * MaxMessage

// joinChunks reads the chunk frames that follow first (next returns each
// one's plaintext) until they add up to the size first declares. Memory
// grows with the bytes received, never past limit (MaxMessage if 0) for
// this message nor past what budget has left for all of them, whatever
// size a peer declares.
func joinChunks(first *pb.Chunk, limit int, next func() ([]byte, error), budget *semaphore.Weighted) (_ []byte, err error) {
	if limit <= 0 {
		limit = MaxMessage
	}
	total := first.GetTotalSize()
	switch {
	case total <= ChunkSize:
		return nil, invalid("chunk.total_size", "%d bytes fit in one frame; chunks are for larger messages", total)
	case total > uint64(limit):
		return nil, &fieldError{path: "chunk.total_size", err: fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, total, limit)}
	}
	var held int64
	defer func() { budget.Release(held) }()
	buf := make([]byte, 0, min(int(total), 2*ChunkSize))
	ch := first
	for {
		data := ch.GetData()
		if len(data) == 0 || len(buf)+len(data) > int(total) {
			return nil, invalid("chunk.data", "%d bytes after %d of %d", len(data), len(buf), total)
		}
		if !budget.TryAcquire(int64(len(data))) {
			return nil, &fieldError{path: "chunk", err: fmt.Errorf("%w: this node is joining %d bytes of large messages already", ErrPayloadTooLarge, JoinBudget)}
		}
		held += int64(len(data))
		buf = append(buf, data...)
		if len(buf) == int(total) {
			return buf, nil
		}
		pt, err := next()
		if err != nil {
			return nil, err
		}
		var w pb.Message
		if err := unmarshal("message", pt, &w); err != nil {
			return nil, err
		}
		next, ok := w.GetBody().(*pb.Message_Chunk)
		if !ok || next.Chunk.GetTotalSize() != 0 {
			return nil, invalid("chunk", "message interrupted after %d of %d bytes", len(buf), total)
		}
		ch = next.Chunk
	}
}
