package protocol

// Chunked messages: a message larger than ChunkSize sealed as consecutive
// chunk frames (queueChunk), and joined again on receipt (joinChunks)
// within a per-message limit and a process-wide budget.

import (
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

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
//
// Until half the declared total has come, the bytes wait in recycled
// chunk buffers (chunkBufs); then the message takes one buffer of exactly
// its total, the bytes so far are copied in and the rest is appended
// there. So a message is copied about 1.5 times and takes new memory only
// for itself: growing one buffer by doubling copied a 16 MiB message
// about twice and took 46 MiB of new memory for it (2, 4, 8, 16 MiB, and
// its whole size again for the bytes past 16 MiB), which costs more than
// the copies on machines slow to hand out fresh pages (docs/performance.md).
// The message's buffer is never more than twice what was received; the
// budget counts it and the chunk buffers held beside it (at the switch,
// both for as long as the copy takes).
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
	var (
		held   int64    // taken from budget
		pieces [][]byte // the bytes so far, before buf is taken
		got    int      // bytes received
		buf    []byte   // the message, once half of it has come
	)
	defer func() {
		for _, p := range pieces {
			putChunkBuf(p)
		}
		budget.Release(held)
	}()
	take := func(n int) error {
		if !budget.TryAcquire(int64(n)) {
			return &fieldError{path: "chunk", err: fmt.Errorf("%w: this node is joining %d bytes of large messages already", ErrPayloadTooLarge, JoinBudget)}
		}
		held += int64(n)
		return nil
	}
	for {
		if len(data) == 0 || got+len(data) > int(total) {
			return nil, invalid("chunk.data", "%d bytes after %d of %d", len(data), got, total)
		}
		got += len(data)
		switch {
		case buf != nil:
			buf = append(buf, data...)
		case 2*got < int(total):
			for len(data) > 0 {
				if len(pieces) == 0 || len(pieces[len(pieces)-1]) == chunkBufCap {
					if err := take(chunkBufCap); err != nil {
						return nil, err
					}
					p := getChunkBuf()
					if p == nil {
						p = make([]byte, 0, chunkBufCap)
					}
					pieces = append(pieces, p)
				}
				p := &pieces[len(pieces)-1]
				n := min(chunkBufCap-len(*p), len(data))
				*p = append(*p, data[:n]...)
				data = data[n:]
			}
		default:
			if err := take(int(total)); err != nil {
				return nil, err
			}
			buf = make([]byte, 0, total)
			for _, p := range pieces {
				buf = append(buf, p...)
				putChunkBuf(p)
			}
			budget.Release(int64(len(pieces)) * chunkBufCap)
			held -= int64(len(pieces)) * chunkBufCap
			pieces = nil
			buf = append(buf, data...)
		}
		if got == int(total) {
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
			return nil, invalid("chunk", "message interrupted after %d of %d bytes", got, total)
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
