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
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Segments. On a disk store, offers and results from segBlobMin up to
// fileBlobMin bytes are appended to segment files under <dir>/segments,
// and the blob key holds a reference (segRef: the segment, the offset, the
// length and the CRC-32C of the value), marked by metaSegBlob in badger's
// user meta byte. Kept inline in badger's tree, such values were written
// again by every compaction that reached them, and the tree only grows (the
// store deletes no delegation): a 64 KiB delegation took 3.7–3.9 ms of
// CPU, most of it in compactions, and 1.7–1.9 ms with its values in a
// segment (docs/performance.md). Up to 256 KiB a segment is also cheaper
// than a file of the value's own, whose creation, sync and directory sync
// cost more than the copy the log takes; from 512 KiB, files are faster.
//
// Crash consistency. A segment is written through the page cache, and not
// synced on the write path: the commit log's record of the write carries
// the value beside its reference (wtxn.setSeg), so the value is durable
// once the record is. Replay at open writes each logged value back at its
// place in its segment, creating the file if the crash lost it, before
// badger gets the reference; and a checkpoint syncs every segment written
// since the last one, and their directory, before the log starts over
// (commitLog.beforeTruncate). So a reference badger holds names bytes that
// are durable, or that a replay writes back. Each run of the store appends
// to a segment of its own, never to one an earlier run wrote, so a replay
// never writes where new values go. A write whose transaction did not
// commit leaves its bytes in the segment, never referred to; nothing
// removes a segment, since the store never deletes an offer or a result.
//
// Without sync (Options.NoSync) there is no commit log: a value is in its
// segment before the commit that refers to it, and a machine crash may
// leave references to bytes that never reached the disk. A read checks the
// length and the CRC, so such a value reads as ErrCorrupt, never as a
// wrong one.
const (
	segDirName         = "segments"
	segBlobMin         = logValuePart // the log takes such a value as it is (wtxn.parts)
	segMax             = 256 << 20    // a segment takes no write past this size
	metaSegBlob   byte = 0x02         // badger user meta: the value is a segRef
	segRefV1      byte = 0x01
	segNamePrefix      = "seg-"
	segNameHex         = 16
)

// segRef is where a value is in a segment.
type segRef struct {
	name string
	off  uint64
	size uint64
	crc  uint32
}

func (r segRef) encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+4+1+len(r.name))
	b = append(b, segRefV1)
	b = binary.AppendUvarint(b, r.off)
	b = binary.AppendUvarint(b, r.size)
	b = binary.BigEndian.AppendUint32(b, r.crc)
	b = append(b, byte(len(r.name)))
	return append(b, r.name...)
}

// decodeSegRef decodes the reference at the front of b and returns how
// many bytes it took: a logged segment write carries the value after it.
func decodeSegRef(b []byte) (segRef, int, error) {
	bad := func(what string) (segRef, int, error) {
		return segRef{}, 0, fmt.Errorf("%w: segment reference: %s", ErrCorrupt, what)
	}
	if len(b) == 0 || b[0] != segRefV1 {
		return bad("unknown version")
	}
	at := 1
	off, n := minimalUvarint(b[at:])
	if n <= 0 {
		return bad("bad offset")
	}
	at += n
	size, n := minimalUvarint(b[at:])
	if n <= 0 {
		return bad("bad size")
	}
	at += n
	if len(b) < at+4+1 {
		return bad("short")
	}
	r := segRef{off: off, size: size, crc: binary.BigEndian.Uint32(b[at:])}
	at += 4
	l := int(b[at])
	at++
	if len(b) < at+l {
		return bad("short name")
	}
	r.name = string(b[at : at+l])
	at += l
	if !validSegName(r.name) {
		return bad(fmt.Sprintf("bad name %q", r.name))
	}
	if r.size < segBlobMin || r.size >= fileBlobMin || r.off+r.size > segMax {
		return bad(fmt.Sprintf("%d bytes at %d", r.size, r.off))
	}
	return r, at, nil
}

// minimalUvarint is binary.Uvarint that also refuses a number written in
// more bytes than it needs, so that a reference has one encoding only.
func minimalUvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -n
	}
	return v, n
}

// validSegName reports whether name is one the store gives a segment:
// "seg-" and 16 lower-case hex digits, nothing that leaves the directory.
func validSegName(name string) bool {
	if len(name) != len(segNamePrefix)+segNameHex || name[:len(segNamePrefix)] != segNamePrefix {
		return false
	}
	for _, c := range name[len(segNamePrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// segments is a disk store's segment files.
type segments struct {
	dir  string
	sync bool

	mu      sync.Mutex
	cur     string // the segment this run appends to; "" before the first write
	curOff  int64
	files   map[string]*os.File // opened segments, read and written through
	dirty   map[string]bool     // segments written since the last syncDirty
	created bool                // a segment was created since the last syncDirty
}

// openSegments makes the segment directory under dir if it is missing.
func openSegments(dir string, sync bool) (*segments, error) {
	if err := makeStoreDir(dir, segDirName, sync); err != nil {
		return nil, err
	}
	return &segments{dir: filepath.Join(dir, segDirName), sync: sync, files: map[string]*os.File{}, dirty: map[string]bool{}}, nil
}

// fileLocked returns the open segment name, opening it (creating it when
// create is set) if need be. sg.mu is held.
func (sg *segments) fileLocked(name string, create bool) (*os.File, error) {
	if f := sg.files[name]; f != nil {
		return f, nil
	}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	path := filepath.Join(sg.dir, name)
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		sg.created = true
	}
	sg.files[name] = f
	return f, nil
}

// append writes b at the end of this run's segment and returns where.
func (sg *segments) append(b []byte) (segRef, error) {
	sg.mu.Lock()
	if sg.cur == "" || sg.curOff+int64(len(b)) > segMax {
		var rnd [segNameHex / 2]byte
		_, _ = rand.Read(rnd[:])
		name := segNamePrefix + hex.EncodeToString(rnd[:])
		// A new file: never one an earlier run wrote (O_EXCL).
		f, err := os.OpenFile(filepath.Join(sg.dir, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			sg.mu.Unlock()
			return segRef{}, fmt.Errorf("store: create a segment: %w", err)
		}
		sg.files[name], sg.created = f, true
		sg.cur, sg.curOff = name, 0
	}
	ref := segRef{name: sg.cur, off: uint64(sg.curOff), size: uint64(len(b)), crc: crc32.Checksum(b, castagnoli)}
	f := sg.files[sg.cur]
	sg.curOff += int64(len(b))
	sg.mu.Unlock()
	if segWriting != nil {
		segWriting()
	}
	if _, err := f.WriteAt(b, int64(ref.off)); err != nil {
		return segRef{}, fmt.Errorf("store: write a segment: %w", err)
	}
	// Marked once written, not when the place was taken: a checkpoint
	// between the two would clear the mark, and the next one leave these
	// bytes unsynced when its log no longer holds them.
	sg.mu.Lock()
	sg.dirty[ref.name] = true
	sg.mu.Unlock()
	return ref, nil
}

// segWriting, when set (tests only), is called by append between taking a
// place in the segment and writing there.
var segWriting func()

// read returns the value ref names, checked against its length and CRC.
func (sg *segments) read(ref segRef, what string) ([]byte, error) {
	sg.mu.Lock()
	f, err := sg.fileLocked(ref.name, false)
	sg.mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: segment %s is missing", ErrCorrupt, what, ref.name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	b := make([]byte, ref.size)
	n, err := f.ReadAt(b, int64(ref.off))
	if errors.Is(err, io.EOF) || n < len(b) {
		return nil, fmt.Errorf("%w: %s: segment %s holds %d of its %d bytes", ErrCorrupt, what, ref.name, n, ref.size)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	if crc32.Checksum(b, castagnoli) != ref.crc {
		return nil, fmt.Errorf("%w: %s: segment %s fails its checksum", ErrCorrupt, what, ref.name)
	}
	return b, nil
}

// restore writes a logged value back where its reference says (replay).
func (sg *segments) restore(ref segRef, b []byte) error {
	if uint64(len(b)) != ref.size || crc32.Checksum(b, castagnoli) != ref.crc {
		return fmt.Errorf("%w: commit log: a segment value does not match its reference", ErrCorrupt)
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if ref.name == sg.cur {
		// Replay runs before this run's first write: cannot happen.
		return fmt.Errorf("%w: commit log: replay into the segment being written", ErrCorrupt)
	}
	f, err := sg.fileLocked(ref.name, true)
	if err != nil {
		return fmt.Errorf("store: restore a segment: %w", err)
	}
	if _, err := f.WriteAt(b, int64(ref.off)); err != nil {
		return fmt.Errorf("store: restore a segment: %w", err)
	}
	sg.dirty[ref.name] = true
	return nil
}

// syncDirty makes every segment written since the last call durable, and
// the names of new ones: on a store that syncs, or when force is set.
func (sg *segments) syncDirty(force bool) error {
	if sg == nil {
		return nil
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if sg.sync || force {
		for name := range sg.dirty {
			if err := sg.files[name].Sync(); err != nil {
				return fmt.Errorf("store: sync segment %s: %w", name, err)
			}
		}
		if sg.created {
			if err := syncDirectory(sg.dir); err != nil {
				return err
			}
		}
	}
	clear(sg.dirty)
	sg.created = false
	return nil
}

func (sg *segments) close() error {
	if sg == nil {
		return nil
	}
	sg.mu.Lock()
	defer sg.mu.Unlock()
	var err error
	for name, f := range sg.files {
		err = errors.Join(err, f.Close())
		delete(sg.files, name)
	}
	return err
}

// putSegBlob stores b for key in a segment (segment.go).
func (s *Store) putSegBlob(txn *wtxn, key, b []byte) error {
	ref, err := s.segs.append(b)
	if err != nil {
		return err
	}
	return txn.setSeg(key, ref.encode(), b)
}

// getSegBlob reads the value a segment reference in item names.
func (s *Store) getSegBlob(item *badger.Item) ([]byte, error) {
	what := fmt.Sprintf("%q", item.Key())
	if s.segs == nil {
		return nil, fmt.Errorf("%w: %s refers to a segment in a store without segments", ErrCorrupt, what)
	}
	b, err := item.ValueCopy(nil)
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", what, err)
	}
	ref, n, err := decodeSegRef(b)
	if err == nil && n != len(b) {
		err = fmt.Errorf("%w: segment reference: %d bytes after it", ErrCorrupt, len(b)-n)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s.segs.read(ref, what)
}
