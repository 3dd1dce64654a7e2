package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

func frameBytes(frames ...[]byte) []byte {
	var out []byte
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out
}

// onlyReader hides io.ByteReader, to test the byte-at-a-time prefix path.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// countingReader counts the bytes handed out.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestFrameRoundTrip(t *testing.T) {
	frames := [][]byte{{}, []byte("hello"), bytes.Repeat([]byte{0xab}, 300), bytes.Repeat([]byte{1}, 1024)}
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 1024)
	for _, f := range frames {
		if err := fw.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	wire := buf.Bytes()
	if !bytes.Equal(wire, frameBytes(frames...)) {
		t.Fatalf("writer output %x", wire)
	}
	for name, r := range map[string]io.Reader{
		"byte reader": bytes.NewReader(wire),
		"plain":       onlyReader{bytes.NewReader(wire)},
	} {
		t.Run(name, func(t *testing.T) {
			fr := NewFrameReader(r, 1024)
			for i, want := range frames {
				got, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
				}
			}
			if _, err := fr.ReadFrame(); err != io.EOF {
				t.Fatalf("after the last frame: got %v, want io.EOF", err)
			}
		})
	}
}

// A frame reader must not consume bytes past its frame: the stream may be
// handed on (e.g. from Hello handling to the sealed-frame loop).
func TestFrameReaderDoesNotReadAhead(t *testing.T) {
	wire := append(frameBytes([]byte("one"), []byte("two")), "tail"...)
	r := bytes.NewReader(wire)
	fr := NewFrameReader(onlyReader{r}, 0)
	for range 2 {
		if _, err := fr.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "tail" {
		t.Fatalf("left %q in the stream, want %q", rest, "tail")
	}
}

func TestFrameReaderErrors(t *testing.T) {
	overlong := bytes.Repeat([]byte{0x80}, 11)
	overflow := append(bytes.Repeat([]byte{0xff}, 9), 0x02)
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty stream", nil, io.EOF},
		{"prefix cut", []byte{0x80}, io.ErrUnexpectedEOF},
		{"body cut", append(binary.AppendUvarint(nil, 10), "short"...), io.ErrUnexpectedEOF},
		{"body missing", binary.AppendUvarint(nil, 1), io.ErrUnexpectedEOF},
		{"non-minimal prefix", []byte{0x85, 0x00, 'a', 'b', 'c', 'd', 'e'}, ErrMalformed},
		{"prefix longer than 10 bytes", overlong, ErrMalformed},
		{"prefix overflows 64 bits", overflow, ErrMalformed},
		{"above cap", frameBytes(make([]byte, 101)), ErrFrameTooLarge},
		{"far above cap", binary.AppendUvarint(nil, 1<<62), ErrFrameTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fr := NewFrameReader(bytes.NewReader(c.in), 100)
			b, err := fr.ReadFrame()
			if !errors.Is(err, c.want) || b != nil {
				t.Fatalf("got %d bytes, %v; want %v", len(b), err, c.want)
			}
		})
	}
	fr := NewFrameReader(bytes.NewReader(frameBytes(make([]byte, 100))), 100)
	if b, err := fr.ReadFrame(); err != nil || len(b) != 100 {
		t.Fatalf("frame exactly at the cap: %d bytes, %v", len(b), err)
	}
}

// allocatedPerRun reports the bytes f allocates on average.
func allocatedPerRun(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	f() // warm up
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// A length above the cap is refused after reading only the prefix: no body
// byte is read and nothing near the declared size is allocated.
func TestFrameReaderRefusesBeforeAllocating(t *testing.T) {
	prefix := binary.AppendUvarint(nil, 1<<30)
	wire := append(prefix, make([]byte, 4096)...)
	var consumed int
	allocated := allocatedPerRun(50, func() {
		cr := &countingReader{r: onlyReader{bytes.NewReader(wire)}}
		_, err := NewFrameReader(cr, DefaultMaxFrame).ReadFrame()
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("got %v, want ErrFrameTooLarge", err)
		}
		consumed = cr.n
	})
	if consumed != len(prefix) {
		t.Errorf("read %d bytes, want only the %d-byte prefix", consumed, len(prefix))
	}
	if allocated > 4<<10 {
		t.Errorf("allocated %d bytes per refused frame", allocated)
	}
}

// A peer that declares a 4 MiB frame and sends 10 bytes costs about one
// growth step, not 4 MiB.
func TestFrameReaderDoesNotTrustDeclaredLength(t *testing.T) {
	wire := append(binary.AppendUvarint(nil, DefaultMaxFrame), make([]byte, 10)...)
	allocated := allocatedPerRun(20, func() {
		_, err := NewFrameReader(bytes.NewReader(wire), DefaultMaxFrame).ReadFrame()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
		}
	})
	if allocated > 2*frameGrowStep {
		t.Errorf("allocated %d bytes for a frame cut after 10 bytes", allocated)
	}
}

// Growing as bytes arrive must stay linear: a full frame costs a small
// multiple of its size, never more than the cap in one buffer.
func TestFrameReaderFullFrameAllocation(t *testing.T) {
	wire := frameBytes(make([]byte, DefaultMaxFrame))
	allocated := allocatedPerRun(5, func() {
		b, err := NewFrameReader(bytes.NewReader(wire), DefaultMaxFrame).ReadFrame()
		if err != nil || len(b) != DefaultMaxFrame || cap(b) != DefaultMaxFrame {
			t.Fatalf("got len %d cap %d, %v", len(b), cap(b), err)
		}
	})
	if allocated > 2*DefaultMaxFrame+frameGrowStep {
		t.Errorf("allocated %d bytes for a %d-byte frame", allocated, DefaultMaxFrame)
	}
}

type recordingWriter struct {
	writes int
	bytes.Buffer
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestFrameWriter(t *testing.T) {
	var w recordingWriter
	fw := NewFrameWriter(&w, 16)
	if err := fw.WriteFrame(make([]byte, 17)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("frame above the cap: got %v, want ErrFrameTooLarge", err)
	}
	if w.writes != 0 {
		t.Fatalf("wrote %d times for a refused frame", w.writes)
	}
	if err := fw.WriteFrame([]byte("sixteen bytes!!!")); err != nil {
		t.Fatal(err)
	}
	if w.writes != 1 {
		t.Fatalf("one frame took %d writes, want 1", w.writes)
	}
	if NewFrameWriter(&w, 0).Max() != DefaultMaxFrame || NewFrameReader(&w, -1).Max() != DefaultMaxFrame {
		t.Fatal("a non-positive cap must mean DefaultMaxFrame")
	}
}

func TestFrameDeadlines(t *testing.T) {
	const timeout = 50 * time.Millisecond
	t.Run("read fires", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		start := time.Now()
		_, err := ReadFrameDeadline(NewFrameReader(a, 0), a, timeout)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want os.ErrDeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("deadline fired after %v", d)
		}
	})
	t.Run("read fires mid-frame", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() {
			_, err := b.Write(binary.AppendUvarint(nil, 100)) // then silence
			done <- err
		}()
		_, err := ReadFrameDeadline(NewFrameReader(a, 0), a, timeout)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want os.ErrDeadlineExceeded", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("write fires", func(t *testing.T) {
		a, b := net.Pipe() // unbuffered: a write waits for a reader
		defer a.Close()
		defer b.Close()
		err := WriteFrameDeadline(NewFrameWriter(a, 0), a, timeout, []byte("nobody reads"))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v, want os.ErrDeadlineExceeded", err)
		}
	})
	t.Run("exchange within deadline", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		done := make(chan error, 1)
		go func() { done <- WriteFrameDeadline(NewFrameWriter(b, 0), b, time.Minute, []byte("hi")) }()
		got, err := ReadFrameDeadline(NewFrameReader(a, 0), a, time.Minute)
		if err != nil || string(got) != "hi" {
			t.Fatalf("got %q, %v", got, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("non-positive timeout", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		if _, err := ReadFrameDeadline(NewFrameReader(a, 0), a, 0); err == nil {
			t.Fatal("read without a timeout was allowed")
		}
		if err := WriteFrameDeadline(NewFrameWriter(a, 0), a, -time.Second, nil); err == nil {
			t.Fatal("write without a timeout was allowed")
		}
	})
	t.Run("deadline refused", func(t *testing.T) {
		cr := &countingReader{r: bytes.NewReader(frameBytes([]byte("x")))}
		_, err := ReadFrameDeadline(NewFrameReader(cr, 0), noDeadlines{}, time.Second)
		if !errors.Is(err, errDeadlinesUnsupported) || cr.n != 0 {
			t.Fatalf("got %v after reading %d bytes; want the deadline error before any read", err, cr.n)
		}
		var w recordingWriter
		err = WriteFrameDeadline(NewFrameWriter(&w, 0), noDeadlines{}, time.Second, []byte("x"))
		if !errors.Is(err, errDeadlinesUnsupported) || w.writes != 0 {
			t.Fatalf("got %v after %d writes", err, w.writes)
		}
	})
}

var errDeadlinesUnsupported = errors.New("deadlines unsupported")

type noDeadlines struct{}

func (noDeadlines) SetReadDeadline(time.Time) error  { return errDeadlinesUnsupported }
func (noDeadlines) SetWriteDeadline(time.Time) error { return errDeadlinesUnsupported }
