package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/encoding/protowire"

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

// messageChunkField is the field number of Message.chunk (kith.proto).
const messageChunkField = 9

// queueChunk seals the frame of Message{chunk: {total_size, data}} at the
// end of c.out. The plaintext is encoded straight into the buffer, where
// the ciphertext goes, and sealed there: one copy of data, no other
// allocation. total is 0 on all but the first chunk; the encoding is the
// one proto.Marshal gives (TestChunkEncodingMatchesProto).
func (c *Conn) queueChunk(total uint64, data []byte) error {
	inner := protowire.SizeTag(2) + protowire.SizeBytes(len(data))
	if total != 0 {
		inner += protowire.SizeTag(1) + protowire.SizeVarint(total)
	}
	ptLen := protowire.SizeTag(messageChunkField) + protowire.SizeBytes(inner)
	n := ptLen + crypto.FrameOverhead
	if n > c.fw.Max() {
		return fmt.Errorf("%w: %d-byte chunk seals to %d bytes, cap %d", ErrFrameTooLarge, len(data), n, c.fw.Max())
	}
	c.out = binary.AppendUvarint(c.out, uint64(n))
	base := len(c.out)
	if cap(c.out)-base < n && base+n <= chunkBufCap {
		// A buffer of the size that is recycled (chunkBufs).
		grown := make([]byte, base, chunkBufCap)
		copy(grown, c.out)
		c.out = grown
	}
	c.out = slices.Grow(c.out, n)
	// crypto's AppendSeal writes the 8-byte sequence number at base and
	// may take its plaintext exactly where the ciphertext goes, after it.
	pt := c.out[base+8 : base+8]
	pt = protowire.AppendTag(pt, messageChunkField, protowire.BytesType)
	pt = protowire.AppendVarint(pt, uint64(inner))
	if total != 0 {
		pt = protowire.AppendTag(pt, 1, protowire.VarintType)
		pt = protowire.AppendVarint(pt, total)
	}
	pt = protowire.AppendTag(pt, 2, protowire.BytesType)
	pt = protowire.AppendVarint(pt, uint64(len(data)))
	pt = append(pt, data...)
	out, err := c.seal(c.out[:base], pt)
	if err != nil {
		return err
	}
	c.out = out
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
// come in one frame.
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

// joinBudget bounds the bytes that all the chunked messages being joined in
// this process hold at once: enough for several of the largest messages,
// and no more however many streams peers open. A join takes from it as
// bytes arrive, so holding a share costs a peer the bandwidth to send it.
var joinBudget = semaphore.NewWeighted(JoinBudget)

// JoinBudget is the most memory, in bytes, that chunked messages being
// joined may hold at once in one process; a join that would go past it
// ends its stream with ErrPayloadTooLarge.
const JoinBudget = 4 * MaxMessage

// joinChunks reads the chunk frames that follow the first (whose declared
// total and data are given; next returns each later one's plaintext, which
// joinChunks does not keep) until they add up to total. Memory grows with
// the bytes received, never past limit (MaxMessage if 0) for this message
// nor past what budget has left for all of them, whatever size a peer
// declares.
func joinChunks(total uint64, data []byte, limit int, next func() ([]byte, error), budget *semaphore.Weighted) (_ []byte, err error) {
	if limit <= 0 {
		limit = MaxMessage
	}
	switch {
	case total <= ChunkSize:
		return nil, invalid("chunk.total_size", "%d bytes fit in one frame; chunks are for larger messages", total)
	case total > uint64(limit):
		return nil, &fieldError{path: "chunk.total_size", err: fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, total, limit)}
	}
	// The budget counts the memory held: the buffer's capacity. It doubles
	// (up to the declared size) as bytes come, so a message is copied
	// about once whatever its size, and never holds more than twice what
	// was received. (Growing by append's own policy, 1.25× for large
	// slices, copied a 16 MiB message about four times.)
	var held int64
	defer func() { budget.Release(held) }()
	var buf []byte
	for {
		if len(data) == 0 || len(buf)+len(data) > int(total) {
			return nil, invalid("chunk.data", "%d bytes after %d of %d", len(data), len(buf), total)
		}
		if cap(buf)-len(buf) < len(data) {
			want := min(int(total), max(2*cap(buf), len(buf)+len(data), 2*ChunkSize))
			if !budget.TryAcquire(int64(want - cap(buf))) {
				return nil, &fieldError{path: "chunk", err: fmt.Errorf("%w: this node is joining %d bytes of large messages already", ErrPayloadTooLarge, JoinBudget)}
			}
			held += int64(want - cap(buf))
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			buf = grown
		}
		buf = append(buf, data...)
		if len(buf) == int(total) {
			return buf, nil
		}
		pt, err := next()
		if err != nil {
			return nil, err
		}
		var w pb.Message
		more, d, isChunk, err := chunkOf(pt, &w)
		if err != nil {
			return nil, err
		}
		if !isChunk || more != 0 {
			return nil, invalid("chunk", "message interrupted after %d of %d bytes", len(buf), total)
		}
		data = d
	}
}

// chunkOf decodes a frame's plaintext. For a chunk it returns the total it
// declares and its data, which shares pt's memory when the chunk is
// encoded the way every kith node encodes it (queueChunk): reading it
// costs no copy of the data. Any other message is decoded into w, and so
// is a chunk encoded some other valid way (its data is then w's copy).
func chunkOf(pt []byte, w *pb.Message) (total uint64, data []byte, isChunk bool, err error) {
	if total, data, ok := plainChunk(pt); ok {
		return total, data, true, nil
	}
	if err := unmarshal("message", pt, w); err != nil {
		return 0, nil, false, err
	}
	if ch, ok := w.GetBody().(*pb.Message_Chunk); ok {
		return ch.Chunk.GetTotalSize(), ch.Chunk.GetData(), true, nil
	}
	return 0, nil, false, nil
}

// plainChunk reads pt as a Message that holds a chunk and nothing else: one
// Message.chunk field spanning pt, holding at most one total_size and one
// data field and no other. Exactly then it reports ok, with what
// proto.Unmarshal would decode (TestPlainChunkMatchesProto); anything else
// is left to proto.Unmarshal.
func plainChunk(pt []byte) (total uint64, data []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(pt)
	if n < 0 || num != messageChunkField || typ != protowire.BytesType {
		return 0, nil, false
	}
	inner, m := protowire.ConsumeBytes(pt[n:])
	if m < 0 || n+m != len(pt) {
		return 0, nil, false
	}
	var haveTotal, haveData bool
	for len(inner) > 0 {
		num, typ, n := protowire.ConsumeTag(inner)
		if n < 0 {
			return 0, nil, false
		}
		inner = inner[n:]
		switch {
		case num == 1 && typ == protowire.VarintType && !haveTotal:
			v, m := protowire.ConsumeVarint(inner)
			if m < 0 {
				return 0, nil, false
			}
			total, haveTotal, inner = v, true, inner[m:]
		case num == 2 && typ == protowire.BytesType && !haveData:
			v, m := protowire.ConsumeBytes(inner)
			if m < 0 {
				return 0, nil, false
			}
			data, haveData, inner = v, true, inner[m:]
		default:
			return 0, nil, false
		}
	}
	return total, data, true
}
