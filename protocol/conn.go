package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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
	// Version is the highest protocol version this side speaks on the
	// envelope; the newest (the last of Supported) if zero. Below 1.2 it
	// neither offers nor takes envelope sessions: on the wire it is a 1.1
	// node (mixed-version tests use it).
	Version Version
}

func (o ConnOptions) ioTimeout() time.Duration {
	if o.IOTimeout <= 0 {
		return DefaultIOTimeout
	}
	return o.IOTimeout
}

// sessions reports whether this side speaks envelope sessions (1.2).
func (o ConnOptions) sessions() bool {
	return o.Version == (Version{}) || !o.Version.Less(Version{1, 2})
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

	// Opener only: what a restart of the envelope needs (see restart).
	id     *crypto.Identity
	remote peer.ID
	typ    MessageType
	ini    *crypto.Initiator
	// settled: the responder's first sealed frame has come, so no
	// control frame may follow. Read and written by the receiving
	// goroutine only.
	settled  bool
	restarts int

	wmu sync.Mutex
	// out holds frames sealed but not yet written: a message followed by
	// more (the Hello by the first message, Queue by Send) goes out in
	// one Write.
	out  []byte
	seal func(dst, plaintext []byte) ([]byte, error)
	open func([]byte) ([]byte, error)
	// unconfirmed are the messages sent on a session stream before the
	// responder's first frame: if it rejects the session they are sent
	// again after a full setup. nil once the responder has answered.
	unconfirmed [][]byte
	confirmed   bool
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

// InSession reports whether the stream runs in an envelope session (the
// opener's view; protocol 1.2).
func (c *Conn) InSession() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ini != nil && c.ini.InSession()
}

// Send seals and writes one message, bounded by the I/O timeout, together
// with anything queued before it in one Write.
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
	if err := c.queue(b); err != nil {
		return err
	}
	return c.flush()
}

// Queue seals m behind what is already queued without writing it: the
// next Send or Flush writes them all in one Write. Use it for a message
// that is followed at once by another (an accept by the first status), so
// the two cost one muxer frame. A queue that grows past flushSize is
// written out anyway.
func (c *Conn) Queue(m Message) error {
	b, err := EncodeMessage(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.queue(b)
}

// QueueEncoded is Queue for an already encoded message.
func (c *Conn) QueueEncoded(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.queue(b)
}

// Flush writes whatever Queue left unwritten.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flush()
}

// flushSize is how much queue writes at once: large chunked messages go
// out a chunk per Write, small messages share one.
const flushSize = 64 << 10

// queue seals b into c.out, chunking it when large; c.wmu is held.
func (c *Conn) queue(b []byte) error {
	if !c.confirmed {
		c.unconfirmed = append(c.unconfirmed, b)
	}
	if len(b) <= ChunkSize {
		if err := c.queueFrame(b); err != nil {
			return err
		}
		if len(c.out) >= flushSize {
			return c.flush()
		}
		return nil
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("%w: %d-byte message, limit %d", ErrPayloadTooLarge, len(b), MaxMessage)
	}
	// One chunk per Write, each sealed in place in a buffer kept for the
	// whole message (a recycled one when one is free, see chunkBufs) and
	// given back after it.
	if cap(c.out) < chunkBufCap {
		if buf := getChunkBuf(); buf != nil {
			c.out = append(buf, c.out...) // frames queued before, if any
		}
	}
	defer func() {
		putChunkBuf(c.out)
		c.out = nil
	}()
	for off := 0; off < len(b); off += ChunkSize {
		var total uint64
		if off == 0 {
			total = uint64(len(b))
		}
		if err := c.queueChunk(total, b[off:min(off+ChunkSize, len(b))]); err != nil {
			return err
		}
		if err := c.write(c.out); err != nil {
			return err
		}
		c.out = c.out[:0]
	}
	return nil
}

// queueFrame seals b into one frame at the end of c.out.
func (c *Conn) queueFrame(b []byte) error {
	// The frame (length prefix, sequence number, ciphertext) is sealed
	// straight into the write buffer: no extra copy of a large message.
	n := len(b) + crypto.FrameOverhead
	if n > c.fw.Max() {
		return fmt.Errorf("%w: %d-byte message seals to %d bytes, cap %d", ErrFrameTooLarge, len(b), n, c.fw.Max())
	}
	out := binary.AppendUvarint(c.out, uint64(n))
	out, err := c.seal(out, b)
	if err != nil {
		return err
	}
	c.out = out
	return nil
}

// flush writes c.out in one Write; c.wmu is held.
func (c *Conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	err := c.write(c.out)
	if cap(c.out) <= flushSize {
		c.out = c.out[:0] // reuse small buffers
	} else {
		c.out = nil // do not pin a large one for the stream's life
	}
	return err
}

func (c *Conn) write(b []byte) error {
	if err := c.s.SetWriteDeadline(time.Now().Add(c.opts.ioTimeout())); err != nil {
		return fmt.Errorf("protocol: set write deadline: %w", err)
	}
	_, err := c.s.Write(b)
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
// come in one frame. The caller must not change the plaintext: the large
// strings of a joined message are decoded over its memory (alias.go).
func (c *Conn) RecvRaw(timeout time.Duration) (Message, []byte, error) {
	// A large first frame (a chunk, most likely) is read into a recycled
	// buffer when one is free (see chunkBufs); first holds it after the
	// read only when the frame went there.
	first := getChunkBuf()
	pt, err := c.recvFrame(timeout, &first, true)
	if err != nil {
		putChunkBuf(first)
		return nil, nil, err
	}
	var w pb.Message
	total, data, isChunk, err := chunkOf(pt, &w)
	if err != nil {
		putChunkBuf(first)
		return nil, nil, err
	}
	if !isChunk && len(first) == 0 {
		putChunkBuf(first) // the frame went elsewhere; else the message holds it
	}
	if isChunk {
		// The frames that follow are read into one buffer, reused: each
		// chunk's data is copied out into the message at once. Both
		// buffers are free again once the message is joined.
		scratch := getChunkBuf()
		next := func() ([]byte, error) { return c.recvFrame(c.opts.ioTimeout(), &scratch, false) }
		pt, err = joinChunks(total, data, c.opts.MaxMessage, next, joinBudget)
		putChunkBuf(scratch)
		putChunkBuf(first)
		if err != nil {
			return nil, nil, err
		}
		w.Reset()
		// pt is the joined message's own buffer, which the caller keeps as
		// the raw bytes and never changes: its large strings stay in it.
		if err := aliasUnmarshal("message", pt, &w); err != nil {
			return nil, nil, err
		}
	}
	m, err := messageFromWire(&w)
	if err != nil {
		return nil, nil, err
	}
	return m, pt, nil
}

// recvFrame reads, and opens, the next sealed frame. With buf, the frame is
// read into *buf's memory when it fits (see FrameReader.ReadFrameInto),
// *buf is left holding the frame's buffer for the next call, and the
// plaintext returned shares its memory: it is good until that next call.
// With large, only a frame of largeFrame bytes or more goes to *buf, and
// *buf holds the frame's buffer afterwards only if it did.
func (c *Conn) recvFrame(timeout time.Duration, buf *[]byte, large bool) ([]byte, error) {
	for {
		var into []byte
		if buf != nil {
			into = *buf
		}
		f, inBuf, err := readFrameIntoDeadline(c.fr, c.s, timeout, into, large)
		if buf != nil && inBuf && f != nil {
			*buf = f
		}
		if err != nil {
			return nil, err
		}
		if c.ini == nil || c.settled {
			return c.open(f)
		}
		// The opener's first frames back: a session ack or reject may
		// come, in the clear, before the first sealed frame.
		if crypto.IsControlFrame(f) {
			err := c.ini.Control(f)
			if errors.Is(err, crypto.ErrSessionRejected) {
				err = c.restart()
			}
			if err != nil {
				return nil, err
			}
			continue
		}
		c.ini.Settle()
		c.settled = true
		c.wmu.Lock()
		c.confirmed, c.unconfirmed = true, nil
		c.wmu.Unlock()
		return c.open(f)
	}
}
