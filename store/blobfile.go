package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
)

// Large offers and results (fileBlobMin bytes or more) are kept in files of
// their own under <dir>/blobs, one file per value, and the blob key holds a
// reference to the file (fileRef, marked by metaFileBlob in badger's user
// meta byte) instead of the value. Badger took such a value by encoding it
// into a buffer it grew, then copying that into its memory-mapped value
// log, where every fresh page cost a fault: about 60 ms of CPU for 16 MiB,
// against about 13 ms for one write(2) of the same bytes to a file. A
// durable 16 MiB delegation stores four such values.
//
// Crash consistency. A value's file is written, synced, and its directory
// synced, inside the transaction's function: before the commit that
// refers to it. So a committed reference always names a whole file. A file
// gets a fresh random name and is never written again, and no file is
// removed while the store is open, so nothing a reader may still refer to
// goes away under it. A write whose transaction did not commit (a failed or
// retried transaction, a crash between the file and the commit), and the
// file of a value that a later write replaced, are left behind; Open
// removes every file that no blob key refers to (sweepBlobFiles). The
// delegation engine never replaces an offer or a result, so in practice
// only failures leave files behind.
//
// On Linux a syncing store writes every value file with O_DIRECT, past the
// page cache (writeDirect): the file is synced at once and read back rarely
// (the engine keeps what it just stored), so the page cache holds nothing a
// later step wants, and taking pages into it is not free. On the machine
// where this was measured a 16 MiB value took 12 ms written and synced that
// way, against 58–67 ms through the page cache, which had to take in 4,096
// pages it had not held before. Smaller values were first kept buffered,
// which looked as fast for them in short runs; in a long one the store,
// which keeps its files, takes fresh pages on every write, and direct writes
// from fileBlobMin took 10–13% less time and 15–22% less CPU per 1 MiB
// delegation (BenchmarkLargeDelegation, 100 each, three rounds alternating),
// and as long at 300 KiB. A file system that refuses direct I/O gets
// buffered writes from then on. A read goes through the page cache.
//
// A direct file is allocated to its size first, and then written and
// synced through Linux AIO where the kernel takes it (aio_linux.go): a
// goroutine blocked in write(2) held its P, the right to run Go code, for
// the whole write, which on two cores left the hashes beside it no core.
//
// A read checks the file's size and CRC-32C against the reference: a
// missing, short or altered file is ErrCorrupt, never a wrong value. With
// Options.NoSync neither the files nor the directory are synced: a machine
// crash may then leave the latest references naming missing files.
const (
	blobDirName       = "blobs"
	fileBlobMin       = 256 << 10 // from schema 8; 128 KiB in schema 7, 256 KiB before
	fileRefMin        = 128 << 10 // the smallest value a file may hold: schema 7 wrote such files
	metaFileBlob byte = 0x01      // badger user meta: the value is a fileRef
	fileRefV1    byte = 0x01
	fileNameRand      = 8 // random bytes in a file's name, after its key
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileBlobs is a disk store's directory of value files.
type fileBlobs struct {
	dir  string
	sync bool
	// buffered is set once direct writes failed here: the file system
	// does not take them, and every later file is written buffered.
	buffered atomic.Bool

	// directBufs holds the aligned buffers that direct writes of
	// unaligned values go through, at most maxDirectBufs: allocated as
	// writes need them, kept for the store's life (a fresh one per write
	// cost more than the copy it serves). Staged files (stage.go) are
	// written side by side.
	directBufs chan []byte
	directMu   sync.Mutex
	directMade int // guarded by directMu

	staged stageSet
}

// maxDirectBufs is how many direct writes run at once; more wait for a
// buffer.
const maxDirectBufs = 2

// directBuf takes an aligned buffer for a direct write; put it back with
// putDirectBuf.
func (fb *fileBlobs) directBuf() []byte {
	select {
	case b := <-fb.directBufs:
		return b
	default:
	}
	fb.directMu.Lock()
	if fb.directMade < maxDirectBufs {
		fb.directMade++
		fb.directMu.Unlock()
		return alignedBuffer(directChunk)
	}
	fb.directMu.Unlock()
	return <-fb.directBufs
}

func (fb *fileBlobs) putDirectBuf(b []byte) { fb.directBufs <- b }

// Direct writes are of whole blocks of directBlock bytes, from the value
// itself when it is aligned, else through a buffer aligned to directBlock,
// in pieces of directChunk; the last part block goes through the page
// cache.
const (
	directBlock = 4096
	directChunk = 4 << 20
)

func alignedBuffer(n int) []byte {
	b := make([]byte, n+directBlock)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (directBlock - 1))
	return b[off : off+n]
}

// fileRef is what a blob key holds for a value kept in a file.
type fileRef struct {
	size uint64
	crc  uint32
	name string
}

func (r fileRef) encode() []byte {
	b := append(make([]byte, 0, 1+binary.MaxVarintLen64+4+len(r.name)), fileRefV1)
	b = binary.AppendUvarint(b, r.size)
	b = binary.BigEndian.AppendUint32(b, r.crc)
	return append(b, r.name...)
}

func decodeFileRef(b []byte) (fileRef, error) {
	if len(b) == 0 || b[0] != fileRefV1 {
		return fileRef{}, fmt.Errorf("%w: blob file reference: unknown version", ErrCorrupt)
	}
	size, n := binary.Uvarint(b[1:])
	if n <= 0 || len(b) < 1+n+4 {
		return fileRef{}, fmt.Errorf("%w: blob file reference: short", ErrCorrupt)
	}
	r := fileRef{size: size, crc: binary.BigEndian.Uint32(b[1+n:]), name: string(b[1+n+4:])}
	if r.size < fileRefMin || r.size > MaxValueSize {
		return fileRef{}, fmt.Errorf("%w: blob file reference: size %d", ErrCorrupt, r.size)
	}
	if !validFileName(r.name) {
		return fileRef{}, fmt.Errorf("%w: blob file reference: bad name %q", ErrCorrupt, r.name)
	}
	return r, nil
}

// fileName is a new, unique name for a file holding key's value: the key
// in hex (so that sweepBlobFiles can tell which key may refer to it), a
// dot, and random bytes in hex.
func fileName(key []byte) (string, error) {
	var r [fileNameRand]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(key) + "." + hex.EncodeToString(r[:]), nil
}

// fileKey is the blob key that a file of that name may hold the value of.
func fileKey(name string) ([]byte, bool) {
	k, r, ok := strings.Cut(name, ".")
	if !ok || len(r) != 2*fileNameRand {
		return nil, false
	}
	if _, err := hex.DecodeString(r); err != nil {
		return nil, false
	}
	key, err := hex.DecodeString(k)
	if err != nil || !strings.HasPrefix(string(key), prefixBlob) {
		return nil, false
	}
	return key, true
}

func validFileName(name string) bool {
	_, ok := fileKey(name)
	return ok
}

// read returns the value ref names, checked against its size and CRC.
func (fb *fileBlobs) read(ref fileRef, what string) ([]byte, error) {
	f, err := os.Open(filepath.Join(fb.dir, ref.name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: its file %s is missing", ErrCorrupt, what, ref.name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	if uint64(st.Size()) != ref.size {
		return nil, fmt.Errorf("%w: %s: its file holds %d bytes, want %d", ErrCorrupt, what, st.Size(), ref.size)
	}
	b := make([]byte, ref.size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	if crc32.Checksum(b, castagnoli) != ref.crc {
		return nil, fmt.Errorf("%w: %s: its file fails its checksum", ErrCorrupt, what)
	}
	return b, nil
}

// openFileBlobs creates the directory of value files of a disk store in
// dir, and removes the files no blob key refers to (see the comment at the
// top of this file).
func (s *Store) openFileBlobs(dir string, sync bool) error {
	fb := &fileBlobs{dir: filepath.Join(dir, blobDirName), sync: sync, directBufs: make(chan []byte, maxDirectBufs)}
	if err := makeStoreDir(dir, blobDirName, sync); err != nil {
		return err
	}
	s.files = fb
	return s.sweepBlobFiles()
}

// makeStoreDir creates the directory name under dir if it is missing; on a
// store that syncs, the new directory's name is durable before any file
// in it is.
func makeStoreDir(dir, name string, sync bool) error {
	path := filepath.Join(dir, name)
	_, err := os.Stat(path)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %w", err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		return fmt.Errorf("store: create %s: %w", path, err)
	}
	if sync {
		return syncDirectory(dir)
	}
	return nil
}

// sweepBlobFiles removes the files of the blob directory that no blob key
// refers to. It runs at open, before any write: no transaction can be
// about to commit a reference to a file it removes. Files whose names kith
// does not give are left alone, and so is a file whose key holds a
// reference that does not decode: reading that value says ErrCorrupt, and
// the store still opens.
func (s *Store) sweepBlobFiles() error {
	entries, err := os.ReadDir(s.files.dir)
	if err != nil {
		return fmt.Errorf("store: read %s: %w", s.files.dir, err)
	}
	var gone []string
	err = s.view(func(txn *wtxn) error {
		for _, e := range entries {
			key, ok := fileKey(e.Name())
			if !ok || !e.Type().IsRegular() {
				continue
			}
			item, err := txn.Get(key)
			if errors.Is(err, badger.ErrKeyNotFound) {
				gone = append(gone, e.Name())
				continue
			}
			if err != nil {
				return fmt.Errorf("store: read %q: %w", key, err)
			}
			ref, isFile, err := itemFileRef(item)
			if errors.Is(err, ErrCorrupt) {
				continue
			}
			if err != nil {
				return err
			}
			if !isFile || ref.name != e.Name() {
				gone = append(gone, e.Name())
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: sweep %s: %w", s.files.dir, err)
	}
	for _, name := range gone {
		if err := os.Remove(filepath.Join(s.files.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("store: sweep %s: %w", s.files.dir, err)
		}
	}
	return nil
}

// itemFileRef decodes the file reference a blob key's item holds, and says
// whether it holds one (or the value itself).
func itemFileRef(item *badger.Item) (ref fileRef, isFile bool, err error) {
	if item.UserMeta()&metaFileBlob == 0 {
		return fileRef{}, false, nil
	}
	err = item.Value(func(b []byte) error {
		ref, err = decodeFileRef(b)
		return err
	})
	if err != nil {
		return fileRef{}, true, fmt.Errorf("%q: %w", item.Key(), err)
	}
	return ref, true, nil
}
