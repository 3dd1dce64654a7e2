package protocol

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// writeSizes records the size of every Write on a stream.
type writeSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(b))
	w.mu.Unlock()
	return w.Conn.Write(b)
}

// A task far larger than a frame crosses in chunks, each frame small, and
// arrives byte for byte: the receiver's raw plaintext is the sender's
// encoding, so hashes over it agree.
func TestConnChunkedRoundTrip(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	wa := &writeSizes{Conn: a}
	text := strings.Repeat("0123456789abcdef", (5<<20)/16+3)
	offer := &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Role: "user", Parts: []Part{TextPart(text)}}}
	want, err := EncodeMessage(offer)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan acceptResult, 1)
	go func() {
		c, m, raw, err := Accept(b, bob, alice.PeerID(), crypto.NewMemoryReplayCache(nil), ConnOptions{IOTimeout: 5 * time.Second})
		ch <- acceptResult{c, m, raw, err}
	}()
	c, err := Dial(wa, alice, bob.PeerID(), offer, ConnOptions{IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	res := <-ch
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !bytes.Equal(res.raw, want) {
		t.Fatalf("joined plaintext differs from the encoding (%d vs %d bytes)", len(res.raw), len(want))
	}
	if got := res.first.(*DelegationOffer).Task.Parts[0].Text; got != text {
		t.Fatalf("text of %d bytes arrived as %d bytes", len(text), len(got))
	}
	wa.mu.Lock()
	frames := len(wa.sizes)
	for _, n := range wa.sizes {
		if n > ChunkSize+1024 {
			t.Errorf("a frame of %d bytes went out; chunks keep frames near %d", n, ChunkSize)
		}
	}
	wa.mu.Unlock()
	if frames < 6 {
		t.Errorf("%d frames for a 5 MiB offer: it was not chunked", frames)
	}

	// And back: a large result to the opener.
	result := &DelegationStatus{ID: offer.ID, State: StateRunning, Seq: 1, Partial: []Part{TextPart(text)}}
	go func() { _ = res.c.Send(result) }()
	m, raw, err := c.RecvRaw(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wantBack, _ := EncodeMessage(result)
	if !bytes.Equal(raw, wantBack) || m.(*DelegationStatus).Partial[0].Text != text {
		t.Fatal("the large reply did not arrive intact")
	}
}

func TestConnRefusesPayloadOverLimit(t *testing.T) {
	big := &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Parts: []Part{TextPart(strings.Repeat("x", MaxPayload+1))}}}
	if _, err := EncodeMessage(big); !errors.Is(err, ErrPayloadTooLarge) || !errors.Is(err, ErrMalformed) {
		t.Fatalf("encoding %d bytes of task: %v, want ErrPayloadTooLarge", MaxPayload+1, err)
	}
	ok := &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Parts: []Part{TextPart(strings.Repeat("x", MaxPayload/2)), TextPart(strings.Repeat("y", MaxPayload/2))}}}
	if _, err := EncodeMessage(ok); err != nil {
		t.Fatalf("a task of exactly MaxPayload bytes: %v", err)
	}
}

func chunkFrame(t testing.TB, total uint64, data []byte) []byte {
	b, err := marshal(&pb.Message{Body: &pb.Message_Chunk{Chunk: &pb.Chunk{TotalSize: total, Data: data}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Hostile chunk sequences end the message with a typed error, and never
// allocate more than the receiver's cap.
func TestJoinChunksRefusesBadSequences(t *testing.T) {
	piece := bytes.Repeat([]byte{'a'}, ChunkSize)
	status, _ := EncodeMessage(&DelegationStatus{ID: NewDelegationID(), State: StateRunning, Seq: 1})
	cases := []struct {
		name   string
		first  *pb.Chunk
		rest   [][]byte
		limit  int
		wantIs error
	}{
		{"total fits one frame", &pb.Chunk{TotalSize: 10, Data: []byte("0123456789")}, nil, 0, ErrMalformed},
		{"total above the cap", &pb.Chunk{TotalSize: 3 * ChunkSize, Data: piece}, nil, 2 * ChunkSize, ErrPayloadTooLarge},
		{"total above MaxMessage", &pb.Chunk{TotalSize: 1 << 40, Data: piece}, nil, 0, ErrPayloadTooLarge},
		{"empty data", &pb.Chunk{TotalSize: 2 * ChunkSize}, nil, 0, ErrMalformed},
		{"data past total", &pb.Chunk{TotalSize: ChunkSize + 1, Data: piece}, [][]byte{chunkFrame(t, 0, []byte("xy"))}, 0, ErrMalformed},
		{"second chunk restates total", &pb.Chunk{TotalSize: 2 * ChunkSize, Data: piece}, [][]byte{chunkFrame(t, 2*ChunkSize, piece)}, 0, ErrMalformed},
		{"interrupted by a message", &pb.Chunk{TotalSize: 2 * ChunkSize, Data: piece}, [][]byte{status}, 0, ErrMalformed},
		{"stream ends", &pb.Chunk{TotalSize: 2 * ChunkSize, Data: piece}, nil, 0, io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := joinChunks(c.first.GetTotalSize(), c.first.GetData(), c.limit, framesFrom(c.rest), semaphore.NewWeighted(JoinBudget))
			if err == nil || got != nil {
				t.Fatalf("joined %d bytes, err %v; want an error", len(got), err)
			}
			if !errors.Is(err, c.wantIs) {
				t.Fatalf("error %v, want %v", err, c.wantIs)
			}
		})
	}
}

// framesFrom returns the frames one by one, then io.ErrUnexpectedEOF.
func framesFrom(frames [][]byte) func() ([]byte, error) {
	return func() ([]byte, error) {
		if len(frames) == 0 {
			return nil, io.ErrUnexpectedEOF
		}
		f := frames[0]
		frames = frames[1:]
		return f, nil
	}
}

// joinPieces joins msg sent as a first chunk and later chunks of size
// step (the last one shorter).
func joinPieces(t *testing.T, msg []byte, step int, budget *semaphore.Weighted) ([]byte, error) {
	t.Helper()
	first, rest := msg[:min(step, len(msg))], msg[min(step, len(msg)):]
	next := func() ([]byte, error) {
		if len(rest) == 0 {
			return nil, io.ErrUnexpectedEOF
		}
		d := rest[:min(step, len(rest))]
		rest = rest[len(d):]
		return chunkFrame(t, 0, d), nil
	}
	return joinChunks(uint64(len(msg)), first, 0, next, budget)
}

// A joined message is the bytes sent, whatever the chunks' sizes (smaller
// than a chunk buffer, or larger), and the join gives its budget back.
func TestJoinChunksJoins(t *testing.T) {
	for _, total := range []int{ChunkSize + 1, 2*ChunkSize + 5, 5*ChunkSize + 123} {
		msg := make([]byte, total)
		for i := range msg {
			msg[i] = byte(i * 31 / 7)
		}
		for _, step := range []int{3000, ChunkSize, chunkBufCap + 7, 2*ChunkSize + 1} {
			budget := semaphore.NewWeighted(JoinBudget)
			got, err := joinPieces(t, msg, step, budget)
			if err != nil {
				t.Fatalf("total %d in chunks of %d: %v", total, step, err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("total %d in chunks of %d: joined bytes differ", total, step)
			}
			if !budget.TryAcquire(JoinBudget) {
				t.Fatalf("total %d in chunks of %d: budget not given back", total, step)
			}
		}
	}
}

// A large message takes new memory once, for itself: the bytes before its
// buffer wait in recycled chunk buffers. Growing one buffer by doubling
// took about twice the message.
func TestJoinChunksAllocatesTheMessageOnce(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // the recycled buffers stay put
	const total = 16 * ChunkSize
	msg := bytes.Repeat([]byte{'k'}, total)
	budget := semaphore.NewWeighted(JoinBudget)
	if _, err := joinPieces(t, msg, ChunkSize, budget); err != nil { // fills the pool
		t.Fatal(err)
	}
	// The frames are encoded before the count starts, so that it counts
	// the join alone.
	var frames [][]byte
	for rest := msg[ChunkSize:]; len(rest) > 0; rest = rest[ChunkSize:] {
		frames = append(frames, chunkFrame(t, 0, rest[:ChunkSize]))
	}
	next := framesFrom(frames)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := joinChunks(total, msg[:ChunkSize], 0, next, budget)
	runtime.ReadMemStats(&after)
	if err != nil || len(got) != total {
		t.Fatalf("joined %d bytes: %v", len(got), err)
	}
	// The message, once. The chunks of its first half wait in recycled
	// buffers, which a pool that lost some (the runtime may drop what a
	// sync.Pool holds) makes anew: at most half the message more. A
	// message grown by doubling takes nearly three times its size.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > total+total/2+total/8 {
		t.Fatalf("joining %d bytes allocated %d", total, alloc)
	}
}

// FuzzJoinChunks feeds arbitrary frames to the chunk joiner: it must never
// panic, and what it returns is never larger than the declared total.
func FuzzJoinChunks(f *testing.F) {
	f.Add(uint64(ChunkSize+2), []byte("ab"), []byte{0x4a, 0x02, 0x12, 0x00})
	f.Add(uint64(2*ChunkSize), bytes.Repeat([]byte{1}, 64), []byte{})
	f.Fuzz(func(t *testing.T, total uint64, data, frames []byte) {
		fr := NewFrameReader(bytes.NewReader(frames), 1<<16)
		next := func() ([]byte, error) { return fr.ReadFrame() }
		out, err := joinChunks(total, data, 4*ChunkSize, next, semaphore.NewWeighted(8*ChunkSize))
		if err == nil && uint64(len(out)) != total {
			t.Fatalf("joined %d bytes, declared %d", len(out), total)
		}
	})
}

// Many peers joining large messages at once cannot make a node hold more
// than its join budget: the join that would pass it fails typed, and the
// budget comes back when a join ends, however it ends.
func TestJoinBudgetBoundsAllJoins(t *testing.T) {
	piece := bytes.Repeat([]byte{'a'}, ChunkSize)
	budget := semaphore.NewWeighted(3 * ChunkSize)
	frames := func(n int) func() ([]byte, error) {
		return func() ([]byte, error) {
			if n == 0 {
				return nil, io.ErrUnexpectedEOF // a peer that stalls, then goes away
			}
			n--
			return chunkFrame(t, 0, piece), nil
		}
	}
	// A first peer holds two chunks' worth, then its stream ends.
	held := make(chan struct{})
	release := make(chan struct{})
	go func() {
		next := frames(1)
		wrapped := func() ([]byte, error) {
			f, err := next()
			if err != nil {
				close(held)
				<-release
			}
			return f, err
		}
		_, _ = joinChunks(10*ChunkSize, piece, 0, wrapped, budget)
	}()
	<-held
	// A second join fits one more chunk, then runs out of budget.
	_, err := joinChunks(10*ChunkSize, piece, 0, frames(5), budget)
	if !errors.Is(err, ErrPayloadTooLarge) {
		t.Fatalf("join past the budget: %v, want ErrPayloadTooLarge", err)
	}
	close(release)
	// Both ended: the whole budget is free again.
	deadline := time.Now().Add(5 * time.Second)
	for !budget.TryAcquire(3 * ChunkSize) {
		if time.Now().After(deadline) {
			t.Fatal("the budget was not given back after the joins ended")
		}
		time.Sleep(time.Millisecond)
	}
}

// Conn encodes chunk frames by hand, in place; they must be what
// proto.Marshal gives for the same Chunk.
func TestChunkEncodingMatchesProto(t *testing.T) {
	data := bytes.Repeat([]byte{7}, ChunkSize)
	for _, total := range []uint64{0, 3 * ChunkSize, 1<<64 - 1} {
		var got []byte
		c := &Conn{fw: NewFrameWriter(nil, 0), seal: func(dst, pt []byte) ([]byte, error) {
			got = bytes.Clone(pt)
			return dst, nil
		}}
		if err := c.queueChunk(total, data); err != nil {
			t.Fatal(err)
		}
		want, err := marshal(&pb.Message{Body: &pb.Message_Chunk{Chunk: &pb.Chunk{TotalSize: total, Data: data}}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("total %d: hand-encoded chunk differs from proto.Marshal", total)
		}
	}
}

// plainChunk reads a chunk without copying its data only when
// proto.Unmarshal would read the same: every encoding it accepts decodes,
// by proto, to a chunk with the same total and data, and the encodings
// kith sends are all accepted. Others (fields twice, unknown fields, a
// chunk beside another body) are left to proto.Unmarshal.
func TestPlainChunkMatchesProto(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 300)
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	inner := func(fields ...[]byte) []byte {
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	totalField := func(v uint64) []byte { return protowire.AppendVarint(tag(nil, 1, protowire.VarintType), v) }
	dataField := func(d []byte) []byte { return protowire.AppendBytes(tag(nil, 2, protowire.BytesType), d) }
	message := func(in []byte) []byte {
		return protowire.AppendBytes(tag(nil, messageChunkField, protowire.BytesType), in)
	}
	cases := []struct {
		name  string
		pt    []byte
		plain bool
	}{
		{"first chunk", chunkFrame(t, 3*ChunkSize, data), true},
		{"later chunk", chunkFrame(t, 0, data), true},
		{"data before total", message(inner(dataField(data), totalField(5))), true},
		{"total alone", message(inner(totalField(5))), true},
		{"empty chunk", message(nil), true},
		{"data twice", message(inner(dataField(data), dataField([]byte("x")))), false},
		{"total twice", message(inner(totalField(5), totalField(6), dataField(data))), false},
		{"unknown field in the chunk", message(inner(totalField(5), protowire.AppendVarint(tag(nil, 3, protowire.VarintType), 1), dataField(data))), false},
		{"total as bytes", message(inner(protowire.AppendBytes(tag(nil, 1, protowire.BytesType), []byte{1}), dataField(data))), false},
		{"another body, then the chunk", append(protowire.AppendBytes(tag(nil, 8, protowire.BytesType), nil), message(inner(dataField(data)))...), false},
		{"the chunk, then another body", append(message(inner(dataField(data))), protowire.AppendBytes(tag(nil, 8, protowire.BytesType), nil)...), false},
		{"chunk twice", append(message(inner(totalField(9))), message(inner(dataField(data)))...), false},
		{"truncated", chunkFrame(t, 0, data)[:100], false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			total, d, ok := plainChunk(c.pt)
			if ok != c.plain {
				t.Fatalf("plain: %v, want %v", ok, c.plain)
			}
			checkPlainChunk(t, c.pt)
			if !ok {
				return
			}
			// The data is pt's own memory, not a copy.
			if len(d) > 0 && !sharesMemory(c.pt, d) {
				t.Fatal("plainChunk copied the data")
			}
			if c.name == "first chunk" && total != 3*ChunkSize {
				t.Fatalf("total %d, want %d", total, 3*ChunkSize)
			}
		})
	}
}

// checkPlainChunk fails t when plainChunk accepts pt but proto.Unmarshal
// decodes it to something else (or refuses it).
func checkPlainChunk(t *testing.T, pt []byte) {
	t.Helper()
	total, data, ok := plainChunk(pt)
	if !ok {
		return
	}
	var w pb.Message
	if err := unmarshal("message", pt, &w); err != nil {
		t.Fatalf("plainChunk read what proto refuses: %v", err)
	}
	ch, isChunk := w.GetBody().(*pb.Message_Chunk)
	if !isChunk {
		t.Fatalf("plainChunk read a chunk, proto a %T", w.GetBody())
	}
	if ch.Chunk.GetTotalSize() != total || !bytes.Equal(ch.Chunk.GetData(), data) {
		t.Fatalf("plainChunk read total %d and %d bytes, proto total %d and %d bytes",
			total, len(data), ch.Chunk.GetTotalSize(), len(ch.Chunk.GetData()))
	}
}

// FuzzPlainChunk: whatever plainChunk accepts, proto.Unmarshal decodes to
// the same chunk.
func FuzzPlainChunk(f *testing.F) {
	f.Add(chunkFrame(f, 3*ChunkSize, []byte("abc")))
	f.Add(chunkFrame(f, 0, []byte("abc")))
	f.Add([]byte{0x4a, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, pt []byte) { checkPlainChunk(t, pt) })
}

// sharesMemory reports whether sub starts inside b's memory.
func sharesMemory(b, sub []byte) bool {
	for i := range b {
		if &b[i] == &sub[0] {
			return true
		}
	}
	return false
}

// TestRecycledFrameBuffers: the buffers that large frames are read into
// and chunks sealed in are recycled (chunkBufs), and a message handed to
// the caller is never among them. Streams in parallel each receive, in
// turn, chunked messages (whose buffers go back for reuse) and messages
// of one large frame (whose plaintext stays in the buffer it was read
// into, now the caller's); every message must still read as it was sent
// after all the others have arrived.
func TestRecycledFrameBuffers(t *testing.T) {
	// One stream on one processor first: sync.Pool keeps a buffer per
	// processor, so there every buffer given back is the next one taken,
	// and a message wrongly given back is overwritten for sure. Then
	// streams in parallel.
	prev := runtime.GOMAXPROCS(1)
	recycledFrameStreams(t, 1)
	runtime.GOMAXPROCS(prev)
	recycledFrameStreams(t, 4)
}

func recycledFrameStreams(t *testing.T, streams int) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	opts := ConnOptions{IOTimeout: 10 * time.Second}
	// Sizes: chunked (above ChunkSize), one large frame (at least
	// largeFrame, within a chunk buffer), small.
	sizes := []int{ChunkSize + ChunkSize/2, largeFrame + 1000, 3 * ChunkSize, ChunkSize - 1000, 100, 2*ChunkSize + 7}
	var wg sync.WaitGroup
	for stream := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			letter := func(i int) string { return string(rune('a' + stream*len(sizes) + i)) }
			msgs := make([]Message, len(sizes))
			want := make([][]byte, len(sizes))
			for i, n := range sizes {
				msgs[i] = &DelegationStatus{ID: NewDelegationID(), State: StateRunning, Seq: uint64(i + 1),
					Partial: []Part{TextPart(strings.Repeat(letter(i), n))}}
				var err error
				if want[i], err = EncodeMessage(msgs[i]); err != nil {
					t.Error(err)
					return
				}
			}
			// The opener receives: it opens frames in place, in the
			// buffers they were read into.
			sent := make(chan error, 1)
			go func() {
				c, _, _, err := Accept(b, bob, alice.PeerID(), crypto.NewMemoryReplayCache(nil), opts)
				for _, m := range msgs {
					if err != nil {
						break
					}
					err = c.Send(m)
				}
				sent <- err
			}()
			c, err := Dial(a, alice, bob.PeerID(), &DelegationStatus{ID: NewDelegationID(), Query: true}, opts)
			if err != nil {
				t.Error(err)
				return
			}
			var got [][]byte
			var texts []string
			for range msgs {
				m, raw, err := c.RecvRaw(opts.IOTimeout)
				if err != nil {
					t.Error(err)
					return
				}
				got = append(got, raw)
				texts = append(texts, m.(*DelegationStatus).Partial[0].Text)
			}
			if err := <-sent; err != nil {
				t.Error(err)
			}
			for i := range msgs {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("stream %d, message %d (%d bytes): its plaintext changed after later messages arrived", stream, i, sizes[i])
				}
				if texts[i] != strings.Repeat(letter(i), sizes[i]) {
					t.Errorf("stream %d, message %d: text differs", stream, i)
				}
			}
		}()
	}
	wg.Wait()
}
