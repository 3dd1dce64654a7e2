package store

// Writing value files: a new file per value, past the page cache where the
// file system allows (writeDirect) and through it elsewhere
// (writeBuffered), synced, and its directory synced (syncDir); the layout
// and the crash rules are in blobfile.go.

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// write stores b in a new file for key and returns its reference. The file
// is synced (on a syncing store), its directory not yet: see syncDir.
func (fb *fileBlobs) write(key, b []byte) (fileRef, error) {
	return fb.writeAhead(key, b, len(b), nil, nil)
}

// writeAhead is write for a b whose bytes are final only below ready until
// final says they all are: where the file is written past the page cache,
// its whole blocks below ready are written at once, the rest after final;
// elsewhere all of it after final. final reporting false (the value was
// dropped) removes the file: errDropped. A nil final is b final already.
// created, when set, is called each time the file is created, before its
// data is written (twice where direct I/O is refused and the file made
// again through the page cache).
func (fb *fileBlobs) writeAhead(key, b []byte, ready int, final func() bool, created func()) (fileRef, error) {
	if created == nil {
		created = func() {}
	}
	name, err := fileName(key)
	if err != nil {
		return fileRef{}, fmt.Errorf("store: name a blob file: %w", err)
	}
	ref := fileRef{size: uint64(len(b)), name: name}
	path := filepath.Join(fb.dir, name)
	g := &gate{final: final}
	if oDirect != 0 && fb.sync && !fb.buffered.Load() {
		ref.crc, err = fb.writeDirect(path, b, ready, g, created)
		if !errors.Is(err, errNoDirect) {
			return ref, err
		}
		fb.buffered.Store(true)
	}
	if !g.wait() {
		return fileRef{}, errDropped
	}
	ref.crc = crc32.Checksum(b, castagnoli)
	return ref, fb.writeBuffered(path, b, created)
}

// errNoDirect: the file system refused direct I/O; nothing is left behind.
var errNoDirect = errors.New("direct I/O refused")

// errDropped: a value staged ahead was dropped before it was final
// (StageResultAhead); its file is gone.
var errDropped = errors.New("store: staged value dropped")

// gate is writeAhead's wait for the rest of a value: final's answer, asked
// once.
type gate struct {
	final  func() bool
	asked  bool
	answer bool
}

func (g *gate) wait() bool {
	if g.final == nil {
		return true
	}
	if !g.asked {
		g.asked, g.answer = true, g.final()
	}
	return g.answer
}

// writeDirect writes b to a new file at path with O_DIRECT, syncs it and
// returns b's CRC. Its whole blocks go to the disk past the page cache
// (writeBlocks); the last part block, if any, goes through the page cache,
// and the sync writes it. (Padding that block and cutting the file back to
// b's size cost a read: the file system reads a block it cuts before it
// zeroes the rest of it, 0.2 ms of the 1.6 ms a 1 MiB file took.)
//
// The whole blocks below ready are written before g says b is final (see
// writeAhead), the rest after; g false removes the file (errDropped).
// created runs once the file exists, before any of b is written.
func (fb *fileBlobs) writeDirect(path string, b []byte, ready int, g *gate, created func()) (crc uint32, err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oDirect, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		_ = os.Remove(path) // some kernels create the file before refusing the flag
		return 0, errNoDirect
	}
	if err != nil {
		return 0, fmt.Errorf("store: create a blob file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("store: write a blob file: %w", cerr)
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	// Allocated to its size, the file takes its writes and its sync
	// through AIO, which hold no P while the disk works (aio_linux.go).
	async := preallocate(f, int64(len(b)))
	created()
	head := min(ready, len(b)) &^ (directBlock - 1)
	whole := len(b) &^ (directBlock - 1)
	// Each part's CRC is computed while its write is in flight.
	if err := fb.writeBlocks(f, b[:head], 0, async, func() { crc = crc32.Update(0, castagnoli, b[:head]) }); err != nil {
		return 0, err
	}
	if !g.wait() {
		return 0, errDropped
	}
	if err := fb.writeBlocks(f, b[head:whole], int64(head), async, func() { crc = crc32.Update(crc, castagnoli, b[head:]) }); err != nil {
		return 0, err
	}
	if whole < len(b) {
		if err := clearDirect(f); err != nil {
			return 0, fmt.Errorf("store: write a blob file: %w", err)
		}
		if _, err := f.WriteAt(b[whole:], int64(whole)); err != nil {
			return 0, fmt.Errorf("store: write a blob file: %w", err)
		}
	}
	if err := syncFile(f, async, false); err != nil {
		return 0, fmt.Errorf("store: sync a blob file: %w", err)
	}
	return crc, nil
}

// syncFile syncs f: through AIO when async (fdatasync, or with all every
// attribute), else with File.Sync.
func syncFile(f *os.File, async, all bool) error {
	if async {
		if err, ok := aioSync(f, all); ok {
			return err
		}
	}
	return f.Sync()
}

// writeBlocks writes b, whole blocks, to f opened with O_DIRECT: straight
// from b when b is aligned to a block (a large Go allocation is, in
// practice: every value of the large delegations measured was), else
// through an aligned buffer, a piece at a time. errNoDirect: the first
// write was refused for its alignment.
//
// meanwhile runs once, while the first write is in flight where it goes
// through AIO, else after it (or at once, for no b).
func (fb *fileBlobs) writeBlocks(f *os.File, b []byte, at int64, async bool, meanwhile func()) error {
	if len(b) == 0 {
		meanwhile()
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))&(directBlock-1) == 0 {
		return directWriteErr(writeAt(f, b, at, async, meanwhile))
	}
	buf := fb.directBuf()
	defer fb.putDirectBuf(buf)
	for off := 0; off < len(b); {
		n := copy(buf, b[off:])
		if first, err := writeAt(f, buf[:n], at+int64(off), async, meanwhile); err != nil {
			return directWriteErr(first && off == 0, err)
		}
		meanwhile = nil
		off += n
	}
	return nil
}

// writeAt writes all of b at off in f, through AIO when async; first
// reports that the error, if any, came before any byte was written.
// meanwhile, if set, runs once: while the first write is in flight where
// it goes through AIO, else after it.
func writeAt(f *os.File, b []byte, off int64, async bool, meanwhile func()) (first bool, err error) {
	once := func() {
		if meanwhile != nil {
			meanwhile()
			meanwhile = nil
		}
	}
	defer once()
	for done := 0; done < len(b); {
		var n int
		ok := false
		if async {
			n, err, ok = aioWrite(f, b[done:], off+int64(done), once)
		}
		if !ok {
			n, err = f.WriteAt(b[done:], off+int64(done))
		}
		if err == nil && n <= 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			return done == 0 && n <= 0, err
		}
		done += n
	}
	return false, nil
}

// directWriteErr wraps a direct write's error; EINVAL before anything was
// written is errNoDirect, an alignment the device does not take.
func directWriteErr(first bool, err error) error {
	if err == nil {
		return nil
	}
	if first && errors.Is(err, syscall.EINVAL) {
		return errNoDirect
	}
	return fmt.Errorf("store: write a blob file: %w", err)
}

// writeBuffered writes b to a new file at path through the page cache, and
// syncs it on a syncing store; created runs once the file exists.
func (fb *fileBlobs) writeBuffered(path string, b []byte, created func()) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("store: create a blob file: %w", err)
	}
	created()
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("store: write a blob file: %w", cerr)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("store: write a blob file: %w", err)
	}
	if fb.sync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("store: sync a blob file: %w", err)
		}
	}
	return nil
}

// FileWriter writes files the way a durable store writes the values it
// keeps in files of their own: in one write through the page cache, or
// past it with O_DIRECT (through an aligned buffer it reuses when b is
// not aligned), then synced. kith bench times both as the disk's floor for
// making a large payload durable; a syncing store writes past the page
// cache wherever the file system takes direct I/O. Not safe for concurrent
// use.
type FileWriter struct {
	fb fileBlobs
}

// NewFileWriter returns a FileWriter; its aligned buffer is allocated by
// the first direct write of an unaligned value and kept.
func NewFileWriter() *FileWriter {
	return &FileWriter{fb: fileBlobs{sync: true, directBufs: make(chan []byte, maxDirectBufs)}}
}

// WriteSynced writes b to a new file at path and syncs it: with O_DIRECT
// when direct is set, errors.ErrUnsupported where the platform or the
// file system does not take it (nothing is left behind then).
func (w *FileWriter) WriteSynced(path string, b []byte, direct bool) error {
	if !direct {
		return w.fb.writeBuffered(path, b, func() {})
	}
	if oDirect == 0 {
		return errors.ErrUnsupported
	}
	_, err := w.fb.writeDirect(path, b, len(b), &gate{}, func() {})
	if errors.Is(err, errNoDirect) {
		return errors.ErrUnsupported
	}
	return err
}

// syncDir makes the names of the files written so far durable; a syncing
// store calls it after writing files and before the commit that refers to
// them.
func (fb *fileBlobs) syncDir() error {
	if !fb.sync {
		return nil
	}
	return syncDirectory(fb.dir)
}

// syncingDir, when set (tests only), is called as each directory sync
// starts; an error it returns is the sync's.
var syncingDir func(dir string) error

// syncDirectory makes the names in directory dir durable.
func syncDirectory(dir string) error {
	if syncingDir != nil {
		if err := syncingDir(dir); err != nil {
			return fmt.Errorf("store: sync %s: %w", dir, err)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("store: sync %s: %w", dir, err)
	}
	err = syncFile(d, true, true)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: sync %s: %w", dir, err)
	}
	return nil
}
