package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// DefaultMaxFrame caps one frame (a Hello or one sealed message) at 4 MiB.
const DefaultMaxFrame = 4 << 20

// frameGrowStep is the first buffer a frame body gets and the least it
// grows by. Buffers grow only as bytes arrive, so a peer that declares a
// large frame and sends little costs about this much, not the declared size.
const frameGrowStep = 64 << 10

// Chunked messages (chunk.go) go in frames of up to chunkBufCap bytes, which
// each side reads or seals in a buffer of that size. Those buffers are
// recycled (chunkBufs): a chunk is copied out of its frame into its
// message as soon as it is opened, and a sealed chunk is written to the
// stream (which keeps no reference, as io.Writer requires) before the next
// is sealed. A 1 MiB delegation allocated about 2 MiB for each large
// frame it read, growing each from frameGrowStep.
//
// A recycled buffer is handed only to a frame of largeFrame bytes or more,
// so that a small message never pins one, and only when one is free: a
// peer that declares large frames and sends little still costs about
// frameGrowStep, not a buffer of its own.
const (
	chunkBufCap = ChunkSize + 4096 // a chunk, its message's fields and the seal
	largeFrame  = ChunkSize / 2
)

var chunkBufs sync.Pool // of *[]byte, each of capacity chunkBufCap

// getChunkBuf returns a free chunk buffer, empty, or nil when none is.
func getChunkBuf() []byte {
	if p, _ := chunkBufs.Get().(*[]byte); p != nil {
		return (*p)[:0]
	}
	return nil
}

// putChunkBuf gives b back for reuse; a buffer of another size is left to
// the collector. The caller must hold no slice of b.
func putChunkBuf(b []byte) {
	if cap(b) == chunkBufCap {
		b = b[:0]
		chunkBufs.Put(&b)
	}
}

// FrameReader reads uvarint-length-prefixed frames from a stream. It reads
// no byte beyond the frame it returns (the length prefix is read a byte at a
// time unless the reader is an io.ByteReader), so the stream can be handed
// on after any frame. After an error the stream is out of step and must be
// closed.
type FrameReader struct {
	r   io.Reader
	br  io.ByteReader // r, when it has ReadByte
	max int
	one [1]byte
}

// NewFrameReader reads frames of at most max bytes from r; max <= 0 means
// DefaultMaxFrame.
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	fr := &FrameReader{r: r, max: max}
	fr.br, _ = r.(io.ByteReader)
	return fr
}

// Max is the reader's frame cap in bytes.
func (fr *FrameReader) Max() int { return fr.max }

// ReadFrame returns the next frame's bytes, which the caller owns.
//
// Errors: io.EOF at a clean end between frames; io.ErrUnexpectedEOF when
// the stream ends inside a frame; ErrFrameTooLarge when the declared length
// is above the cap (nothing of the body is read or allocated); ErrMalformed
// for a length prefix that is not a minimal uvarint of at most 10 bytes; and
// whatever the stream returns (e.g. os.ErrDeadlineExceeded).
func (fr *FrameReader) ReadFrame() ([]byte, error) {
	return fr.ReadFrameInto(nil)
}

func (fr *FrameReader) readByte() (byte, error) {
	if fr.br != nil {
		return fr.br.ReadByte()
	}
	if _, err := io.ReadFull(fr.r, fr.one[:]); err != nil {
		return 0, err
	}
	return fr.one[0], nil
}

// readLength reads a uvarint, refusing encodings longer than needed: each
// length has one encoding, and a peer cannot pad a prefix to stall us.
func (fr *FrameReader) readLength() (uint64, error) {
	var x uint64
	var shift uint
	for i := 0; i < binary.MaxVarintLen64; i++ {
		b, err := fr.readByte()
		if err != nil {
			if i > 0 && errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
		if b < 0x80 {
			if i > 0 && b == 0 {
				return 0, invalid("frame_length", "uvarint is not minimally encoded")
			}
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, invalid("frame_length", "uvarint overflows 64 bits")
			}
			return x | uint64(b)<<shift, nil
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, invalid("frame_length", "uvarint longer than %d bytes", binary.MaxVarintLen64)
}

// readBody reads n bytes, growing the buffer geometrically from
// frameGrowStep but never past n, and only once the previous buffer is
// full: memory follows the bytes received, not the bytes declared, and the
// copying stays linear in n.
func (fr *FrameReader) readBody(n int) ([]byte, error) {
	return fr.readBodyInto(n, nil)
}

// readBodyInto is readBody starting from buf's memory: a body that fits
// in buf's capacity is read there, with no allocation; a larger one grows
// from it as readBody's does.
func (fr *FrameReader) readBodyInto(n int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	if cap(buf) == 0 {
		buf = make([]byte, 0, min(n, frameGrowStep))
	}
	for len(buf) < n {
		if len(buf) == cap(buf) {
			size := min(n, max(2*cap(buf), cap(buf)+frameGrowStep))
			if size == n && n >= largeFrame && n <= chunkBufCap {
				size = chunkBufCap // the last step: a buffer that can be recycled
			}
			next := make([]byte, len(buf), size)
			copy(next, buf)
			buf = next
		}
		m, err := io.ReadFull(fr.r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// ReadFrameInto is ReadFrame reading into buf's memory when the frame fits
// in its capacity (else into a larger buffer grown from it): a caller that
// is done with each frame before it reads the next can read them all into
// one buffer. The frame returned is buf's memory, or the grown buffer.
func (fr *FrameReader) ReadFrameInto(buf []byte) ([]byte, error) {
	f, _, err := fr.readFrame(buf, false)
	return f, err
}

// readFrame is ReadFrameInto; with large, it reads into buf's memory only
// a frame of largeFrame bytes or more, and a smaller one into a buffer of
// its own. inBuf reports that the frame is buf's memory or a buffer grown
// from it (always, without large): the caller may keep it for the next
// frame.
func (fr *FrameReader) readFrame(buf []byte, large bool) (f []byte, inBuf bool, err error) {
	n, err := fr.readLength()
	if err != nil {
		return nil, false, err
	}
	if n > uint64(fr.max) {
		return nil, false, fmt.Errorf("%w: %d bytes declared, cap %d", ErrFrameTooLarge, n, fr.max)
	}
	inBuf = !large || n >= largeFrame
	if !inBuf {
		buf = nil
	}
	f, err = fr.readBodyInto(int(n), buf)
	return f, inBuf, err
}

// FrameWriter writes uvarint-length-prefixed frames to a stream.
type FrameWriter struct {
	w   io.Writer
	max int
	buf []byte
}

// NewFrameWriter writes frames of at most max bytes to w; max <= 0 means
// DefaultMaxFrame. Use the peer's cap: a frame above it is refused there.
func NewFrameWriter(w io.Writer, max int) *FrameWriter {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	return &FrameWriter{w: w, max: max}
}

// Max is the writer's frame cap in bytes.
func (fw *FrameWriter) Max() int { return fw.max }

// WriteFrame writes b as one frame; above the cap it writes nothing and
// returns ErrFrameTooLarge.
func (fw *FrameWriter) WriteFrame(b []byte) error {
	if len(b) > fw.max {
		return fmt.Errorf("%w: %d bytes, cap %d", ErrFrameTooLarge, len(b), fw.max)
	}
	// Prefix and body go out in one Write, so a muxer sends them in one
	// data frame and the reader never waits on half a frame.
	fw.buf = binary.AppendUvarint(fw.buf[:0], uint64(len(b)))
	fw.buf = append(fw.buf, b...)
	_, err := fw.w.Write(fw.buf)
	if cap(fw.buf) > frameGrowStep {
		fw.buf = nil // do not pin a large frame's memory for the stream's life
	}
	return err
}

// Deadliner is the part of a stream that takes deadlines; libp2p's
// network.Stream and net.Conn have it.
type Deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

var errNoTimeout = errors.New("protocol: frame timeout must be positive")

// ReadFrameDeadline sets d's read deadline to timeout from now and reads
// one frame. The deadline stays set afterwards, so a read someone forgets
// to bound fails instead of hanging; the next call replaces it.
func ReadFrameDeadline(fr *FrameReader, d Deadliner, timeout time.Duration) ([]byte, error) {
	f, _, err := readFrameIntoDeadline(fr, d, timeout, nil, false)
	return f, err
}

// readFrameIntoDeadline is ReadFrameDeadline reading into buf (see
// FrameReader.readFrame); a nil buf reads into a new buffer.
func readFrameIntoDeadline(fr *FrameReader, d Deadliner, timeout time.Duration, buf []byte, large bool) ([]byte, bool, error) {
	if timeout <= 0 {
		return nil, false, errNoTimeout
	}
	if err := d.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, false, fmt.Errorf("protocol: set read deadline: %w", err)
	}
	return fr.readFrame(buf, large)
}

// WriteFrameDeadline sets d's write deadline to timeout from now and writes
// b as one frame. Like ReadFrameDeadline, it leaves the deadline set.
func WriteFrameDeadline(fw *FrameWriter, d Deadliner, timeout time.Duration, b []byte) error {
	if timeout <= 0 {
		return errNoTimeout
	}
	if err := d.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("protocol: set write deadline: %w", err)
	}
	return fw.WriteFrame(b)
}
