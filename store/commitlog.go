package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/dgraph-io/badger/v4"
)

// The commit log. A durable store runs badger without SyncWrites and makes
// each commit durable with one synced write to a log of its own, ahead of
// badger: the writes of a batch (commit.go) are encoded into one record,
// the record is written and synced, and only then is the batch committed to
// badger (whose apply the batch's writers do not wait for: wtxn.commit).
// Badger's own commit synced two files (its value log, even when
// nothing was written there, and its memtable WAL, a sparse file whose
// every new page also cost a journal commit): two or three device flushes
// per commit where one suffices. The log is one file, commit.log beside
// badger's, whose blocks are all written before the log writes there again,
// so a record costs one write of whole blocks with O_DIRECT|O_DSYNC (data
// only, no metadata) on Linux: about half of badger's synced commit on the
// machines this was measured on (BenchmarkCommit).
//
// Layout. Two header blocks (slots), then records from logDataStart:
//
//	slot (block 0 or 1): magic "KITHLOG1" | gen u64 | first u64 | crc32c of the 24 bytes before
//	record: crc32c u32 | length u32 | seq u64 | body (length bytes)
//	body:   kindBatch, uvarint count, count × op   |   kindAbort, uvarint seq
//	op:     opSet | uvarint len, key | uvarint len, value | user meta | uvarint expires_at
//	        opDelete | uvarint len, key
//
// The crc covers length, seq and body. Records follow each other with no
// gaps; each write rewrites the block the last record ended in, with the
// same bytes before the new record, so a torn write cannot damage a record
// already synced. Sequence numbers grow by one from the header's first:
// reading stops at the first record that does not check out (zeroes, a
// torn write, or a record left from before the log last started over,
// which has a smaller sequence number).
//
// Checkpoints. Every record's writes are in badger once its batch has
// committed, but badger makes them durable only when it syncs its files or
// flushes a memtable to a table. A checkpoint syncs badger's memtable WALs
// (the active one and those rotated out but not yet flushed; DB.Sync
// reaches only the active one) and value-log files, and their directory;
// after it, every record so far is redundant, and the log starts over at
// logDataStart: the other header slot is written with the next sequence
// number and a higher generation. A torn header write leaves the older slot
// in force, naming records that replay harmlessly. The store checkpoints
// at open (after replaying the log and migrating the schema), and whenever
// the log has grown past logCheckpointAt.
//
// Replay. Opening a store reads the log and applies, in order, each
// record's writes to badger, except records a later abort record names (a
// batch whose badger commit failed after its record was written). A write
// applied again sets what it set before; the log holds every write since
// the last checkpoint, so badger ends up holding the last logged value of
// every key the log names, whatever it kept of its own unsynced files.
const (
	logFileName     = "commit.log"
	logBlock        = 4096
	logDataStart    = 2 * logBlock
	logMagic        = "KITHLOG1"
	logSlotSize     = len(logMagic) + 8 + 8 + 4
	logRecordHeader = 4 + 4 + 8
	logGrowStep     = 256 << 10 // the file grows by whole steps, written as zeroes with the record that needs them
	logKeepBuffer   = 1 << 20   // a write buffer up to this size is kept for the next record
	// logCheckpointAt is the log size past which a commit checkpoints and
	// starts the log over.
	logCheckpointAt = 4 << 20

	kindBatch byte = 1
	kindAbort byte = 2
	opSet     byte = 1
	opDelete  byte = 2
)

// commitLog is a durable store's log. Only the leader of a batch writes it
// (commit.go), and open and Close, when nothing else does.
type commitLog struct {
	dir    string // badger's directory, where the log lives
	f      *os.File
	direct bool // f was opened with O_DIRECT
	sync   bool // O_DSYNC is not available here: write, then f.Sync

	gen  uint64 // generation of the header slot in force
	next uint64 // sequence number of the next record
	off  int64  // end of the last record
	size int64  // bytes of the file known written (whole blocks)

	buf          []byte // aligned write buffer
	checkpointAt int64  // logCheckpointAt; tests make it smaller

	// applying counts the batches whose records are durable and whose
	// badger commits are still being applied (wtxn.commit): a checkpoint
	// and Close wait for them.
	applying sync.WaitGroup
	// applyFault, when set (tests only), is the error the next applies
	// report in place of badger's.
	applyFault func() error

	// beforeTruncate, when set, makes durable what the log's records hold
	// beside badger's writes (segment values, segment.go): a checkpoint
	// calls it after syncing badger and before the log starts over.
	beforeTruncate func() error

	brokenMu sync.Mutex
	// broken is set when no write may follow: an abort could not be
	// logged, or badger did not take a batch whose record is durable.
	// Replay at the next open settles both.
	broken error
}

// openCommitLog opens the log in dir, creating it if missing, and returns it
// with the records it holds, oldest first, aborted batches left out.
func openCommitLog(dir string) (*commitLog, [][]byte, error) {
	path := filepath.Join(dir, logFileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := createCommitLog(dir); err != nil {
			return nil, nil, err
		}
	}
	data, gen, records, next, end, err := readCommitLog(path)
	if err != nil {
		return nil, nil, err
	}
	l := &commitLog{dir: dir, gen: gen, next: next, off: end,
		size: int64(len(data)) &^ (logBlock - 1), buf: alignedBuffer(logBlock), checkpointAt: logCheckpointAt}
	copy(l.buf, data[end&^(logBlock-1):end])
	l.f, err = os.OpenFile(path, os.O_WRONLY|oDirect|oDSync, 0)
	l.direct = oDirect != 0 && err == nil
	if oDirect != 0 && errors.Is(err, syscall.EINVAL) {
		l.f, err = os.OpenFile(path, os.O_WRONLY|oDSync, 0) // a file system without direct I/O
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: open commit log: %w", err)
	}
	l.sync = oDSync == 0
	return l, records, nil
}

// writeAt writes b at off. A file system that took O_DIRECT at open but
// refuses the write (an alignment it does not take) gets the log reopened
// without it, and the write again.
//
// A direct write goes through AIO where the kernel has it: it is as
// synced as the blocking one (O_DSYNC holds for it: the kernel completes
// it once its data is on the disk), and the committer waits for it
// without holding a P, so that the delegations the batch carries, and
// the next batch's, go on running on every core (aio_linux.go). The log's
// blocks are written before it writes there again, so only a write that
// grows the file waits the blocking way in the kernel.
func (l *commitLog) writeAt(b []byte, off int64) error {
	err := l.pwrite(b, off)
	if err != nil && l.direct && errors.Is(err, syscall.EINVAL) {
		f, oerr := os.OpenFile(filepath.Join(l.dir, logFileName), os.O_WRONLY|oDSync, 0)
		if oerr != nil {
			return errors.Join(err, oerr)
		}
		_ = l.f.Close()
		l.f, l.direct = f, false
		_, err = l.f.WriteAt(b, off)
	}
	if err == nil && l.sync {
		err = l.f.Sync()
	}
	return err
}

func (l *commitLog) pwrite(b []byte, off int64) error {
	if l.direct {
		if n, err, ok := aioWrite(l.f, b, off, nil); ok {
			if err == nil && n != len(b) {
				err = io.ErrShortWrite
			}
			return err
		}
	}
	_, err := l.f.WriteAt(b, off)
	return err
}

// readCommitLog reads the log at path: the whole file, the generation of
// its header in force, the batches it holds (parseLogRecords), the
// sequence number of the next record and where the last one ends.
func readCommitLog(path string) (data []byte, gen uint64, batches [][]byte, next uint64, end int64, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, 0, nil, 0, 0, fmt.Errorf("store: read commit log: %w", err)
	}
	gen, first, err := parseLogHeader(data)
	if err != nil {
		return nil, 0, nil, 0, 0, err
	}
	batches, next, end = parseLogRecords(data, first)
	return data, gen, batches, next, end, nil
}

// createCommitLog writes a new, empty log under a temporary name and
// renames it into place, so that a log file always has a valid header.
func createCommitLog(dir string) error {
	tmp := filepath.Join(dir, logFileName+".tmp")
	b := make([]byte, logDataStart)
	putLogSlot(b[logBlock:], 1, 1)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("store: create commit log: %w", err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = errors.Join(f.Sync(), f.Close())
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, logFileName))
	}
	if err == nil {
		err = syncDirectory(dir)
	}
	if err != nil {
		return fmt.Errorf("store: create commit log: %w", err)
	}
	return nil
}

// putLogSlot writes into s the header slot of generation gen, naming
// first as the sequence number of the first record. The slot goes to block
// gen%2 of the file.
func putLogSlot(s []byte, gen, first uint64) {
	s = s[:logSlotSize]
	copy(s, logMagic)
	binary.LittleEndian.PutUint64(s[8:], gen)
	binary.LittleEndian.PutUint64(s[16:], first)
	binary.LittleEndian.PutUint32(s[24:], crc32.Checksum(s[:24], castagnoli))
}

// parseLogHeader returns the generation and first sequence number of the
// valid header slot with the higher generation.
func parseLogHeader(data []byte) (gen, first uint64, err error) {
	if len(data) < logDataStart {
		return 0, 0, fmt.Errorf("%w: commit log: %d bytes, shorter than its header", ErrCorrupt, len(data))
	}
	found := false
	for slot := range 2 {
		s := data[slot*logBlock:][:logSlotSize]
		if string(s[:8]) != logMagic || binary.LittleEndian.Uint32(s[24:]) != crc32.Checksum(s[:24], castagnoli) {
			continue
		}
		g := binary.LittleEndian.Uint64(s[8:])
		if g%2 != uint64(slot) {
			continue // a slot holds the generations of its parity only
		}
		if !found || g > gen {
			gen, first, found = g, binary.LittleEndian.Uint64(s[16:]), true
		}
	}
	if !found {
		return 0, 0, fmt.Errorf("%w: commit log: no valid header", ErrCorrupt)
	}
	return gen, first, nil
}

// parseLogRecords returns the bodies of the batch records in data from
// logDataStart on, starting at sequence number first, without the batches
// an abort record names; the sequence number a next record takes; and
// where the last valid record ends. It stops at the first record that
// does not check out.
func parseLogRecords(data []byte, first uint64) (batches [][]byte, next uint64, end int64) {
	type rec struct {
		seq  uint64
		body []byte
	}
	var recs []rec
	aborted := map[uint64]bool{}
	off, seq := logDataStart, first
	for off+logRecordHeader <= len(data) {
		h := data[off:]
		n64 := uint64(binary.LittleEndian.Uint32(h[4:]))
		if n64 == 0 || n64 > uint64(len(data)-off-logRecordHeader) {
			break
		}
		n := int(n64)
		if binary.LittleEndian.Uint64(h[8:]) != seq ||
			crc32.Checksum(h[4:logRecordHeader+n], castagnoli) != binary.LittleEndian.Uint32(h) {
			break
		}
		body := h[logRecordHeader : logRecordHeader+n]
		switch body[0] {
		case kindBatch:
			recs = append(recs, rec{seq, body})
		case kindAbort:
			if a, k := binary.Uvarint(body[1:]); k > 0 {
				aborted[a] = true
			}
		}
		off += logRecordHeader + n
		seq++
	}
	for _, r := range recs {
		if !aborted[r.seq] {
			batches = append(batches, r.body)
		}
	}
	return batches, seq, int64(off)
}

// logOp is one write of a batch, as the log records it.
type logOp struct {
	del       bool
	key       []byte
	value     []byte
	userMeta  byte
	expiresAt uint64
}

func appendLogOp(b []byte, op logOp) []byte {
	if op.del {
		b = append(b, opDelete)
		b = binary.AppendUvarint(b, uint64(len(op.key)))
		return append(b, op.key...)
	}
	b = appendLogSetHead(b, op.key, len(op.value))
	b = append(b, op.value...)
	return appendLogSetTail(b, op)
}

// appendLogSetHead appends what the encoding of a set op of key to n
// bytes holds before the value, appendLogSetTail what it holds after.
func appendLogSetHead(b, key []byte, n int) []byte {
	b = append(b, opSet)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.AppendUvarint(b, uint64(n))
}

func appendLogSetTail(b []byte, op logOp) []byte {
	b = append(b, op.userMeta)
	return binary.AppendUvarint(b, op.expiresAt)
}

// decodeLogBatch returns the writes of a batch record's body.
func decodeLogBatch(body []byte) ([]logOp, error) {
	bad := func(what string) ([]logOp, error) {
		return nil, fmt.Errorf("%w: commit log: batch record: %s", ErrCorrupt, what)
	}
	if len(body) == 0 || body[0] != kindBatch {
		return bad("not a batch")
	}
	b := body[1:]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > uint64(len(b)) {
		return bad("bad count")
	}
	b = b[n:]
	bytesOf := func() ([]byte, bool) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, false
		}
		v := b[n : n+int(l)]
		b = b[n+int(l):]
		return v, true
	}
	ops := make([]logOp, 0, count)
	for range count {
		if len(b) == 0 {
			return bad("short")
		}
		kind := b[0]
		b = b[1:]
		var op logOp
		var ok bool
		if op.key, ok = bytesOf(); !ok || len(op.key) == 0 {
			return bad("bad key")
		}
		switch kind {
		case opDelete:
			op.del = true
		case opSet:
			if op.value, ok = bytesOf(); !ok || len(b) == 0 {
				return bad("bad value")
			}
			op.userMeta = b[0]
			b = b[1:]
			var n int
			if op.expiresAt, n = binary.Uvarint(b); n <= 0 {
				return bad("bad expiry")
			}
			b = b[n:]
		default:
			return bad(fmt.Sprintf("unknown op %d", kind))
		}
		ops = append(ops, op)
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	return ops, nil
}

// write appends a record whose body is the parts one after the other
// (kindBatch or kindAbort first), and returns once it is durable, with its
// sequence number.
func (l *commitLog) write(parts ...[]byte) (uint64, error) {
	if err := l.isBroken(); err != nil {
		return 0, err
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	seq := l.next
	start := l.off &^ (logBlock - 1) // the block the last record ended in is written again
	end := l.off + logRecordHeader + int64(size)
	to := (end + logBlock - 1) &^ (logBlock - 1)
	if to > l.size {
		to = (end + logGrowStep - 1) &^ (logGrowStep - 1)
	}
	n := int(to - start)
	// The bytes of the block before this record, the earlier records'
	// tails, are at the front of buf since the last write (or open).
	head := int(l.off - start)
	if len(l.buf) < n {
		nb := alignedBuffer(max(n, 2*len(l.buf)))
		copy(nb, l.buf[:head])
		l.buf = nb
	}
	buf := l.buf[:n]
	r := buf[head:]
	binary.LittleEndian.PutUint32(r[4:], uint32(size))
	binary.LittleEndian.PutUint64(r[8:], seq)
	at := logRecordHeader
	for _, p := range parts {
		at += copy(r[at:], p)
	}
	binary.LittleEndian.PutUint32(r, crc32.Checksum(r[4:at], castagnoli))
	clear(buf[int(end-start):])
	if err := l.writeAt(buf, start); err != nil {
		return 0, fmt.Errorf("store: write commit log: %w", err)
	}
	l.next++
	l.off = end
	l.size = max(l.size, to)
	// Keep the block the log now ends in at the front of buf, for the
	// next write; let a large buffer go.
	last := int(end&^(logBlock-1) - start)
	copy(buf, buf[last:min(n, last+logBlock)])
	if len(l.buf) > logKeepBuffer {
		keep := alignedBuffer(logBlock)
		copy(keep, buf[:logBlock])
		l.buf = keep
	}
	return seq, nil
}

// abort records that the batch of sequence number seq did not commit, so
// that replay leaves it out. If that record cannot be written, the log
// refuses every later write: replay would apply the batch.
func (l *commitLog) abort(seq uint64) error {
	body := binary.AppendUvarint([]byte{kindAbort}, seq)
	if _, err := l.write(body); err != nil {
		return l.breakOff(fmt.Errorf("store: commit log: the record of a failed commit could not be cancelled, restart the node: %w", err))
	}
	return nil
}

// breakOff refuses every later write with err (or with the error that
// broke the log first), and returns that error.
func (l *commitLog) breakOff(err error) error {
	l.brokenMu.Lock()
	defer l.brokenMu.Unlock()
	if l.broken == nil {
		l.broken = err
	}
	return l.broken
}

// isBroken returns why the log refuses writes, or nil.
func (l *commitLog) isBroken() error {
	l.brokenMu.Lock()
	defer l.brokenMu.Unlock()
	return l.broken
}

// empty says whether the log holds no record since it last started over.
func (l *commitLog) empty() bool { return l.off == logDataStart }

// full says whether the log has grown past logCheckpointAt.
func (l *commitLog) full() bool { return l.off >= l.checkpointAt }

// checkpoint makes everything badger holds durable and starts the log
// over. It runs while no batch commits: at open, or in a batch's leader.
func (l *commitLog) checkpoint(db *badger.DB) error {
	// Badger must hold every batch the log holds before it is synced and
	// the log starts over.
	l.applying.Wait()
	if err := l.isBroken(); err != nil {
		return err
	}
	if err := syncBadger(db, l.dir); err != nil {
		return err
	}
	if l.beforeTruncate != nil {
		if err := l.beforeTruncate(); err != nil {
			return err
		}
	}
	gen := l.gen + 1
	b := alignedBuffer(logBlock)
	putLogSlot(b, gen, l.next)
	if err := l.writeAt(b, int64(gen%2)*logBlock); err != nil {
		return fmt.Errorf("store: write commit log header: %w", err)
	}
	l.gen = gen
	l.off = logDataStart
	return nil
}

func (l *commitLog) close() error {
	if l == nil {
		return nil
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("store: close commit log: %w", err)
	}
	return nil
}

// syncBadger makes durable everything badger has taken so far: DB.Sync for
// the active memtable's WAL and the newest value-log file, then every
// memtable WAL (*.mem: those rotated out but not yet flushed to a table,
// which DB.Sync does not reach) and value-log file (*.vlog), and their
// directory. Tables and the manifest badger syncs itself when it writes
// them. A file badger removes meanwhile was flushed into a table first.
func syncBadger(db *badger.DB, dir string) error {
	if err := db.Sync(); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".mem") && !strings.HasSuffix(name, ".vlog") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
		if err != nil {
			return fmt.Errorf("store: checkpoint: sync %s: %w", name, err)
		}
	}
	if err := syncDirectory(dir); err != nil {
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}

// dropCommitLog applies the log in dir, if there is one, to a store opened
// without sync, makes badger durable, and removes the log: writes from now
// on bypass it, and a log left behind would bring older values back over
// them the next time the store opens with sync.
func dropCommitLog(db *badger.DB, dir string, segs *segments) error {
	path := filepath.Join(dir, logFileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	_, _, records, _, _, err := readCommitLog(path)
	if err != nil {
		return err
	}
	if err := replayLog(db, records, segs); err != nil {
		return err
	}
	if err := syncBadger(db, dir); err != nil {
		return err
	}
	if err := segs.syncDirty(true); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("store: remove commit log: %w", err)
	}
	return syncDirectory(dir)
}

// replayLog applies the writes of records to badger, oldest first, each
// record in a transaction of its own (it was one batch, one transaction).
// A value logged for a segment is written back into it first (segment.go).
func replayLog(db *badger.DB, records [][]byte, segs *segments) error {
	for i, body := range records {
		ops, err := decodeLogBatch(body)
		if err != nil {
			return fmt.Errorf("record %d of %d: %w", i+1, len(records), err)
		}
		err = db.Update(func(txn *badger.Txn) error {
			for _, op := range ops {
				if op.del {
					if err := txn.Delete(op.key); err != nil {
						return err
					}
					continue
				}
				value := op.value
				if op.userMeta&metaSegBlob != 0 {
					ref, n, err := decodeSegRef(value)
					if err != nil {
						return err
					}
					if segs == nil {
						return fmt.Errorf("%w: commit log: a segment value in a store without segments", ErrCorrupt)
					}
					if err := segs.restore(ref, value[n:]); err != nil {
						return err
					}
					value = value[:n]
				}
				e := badger.NewEntry(op.key, value).WithMeta(op.userMeta)
				e.ExpiresAt = op.expiresAt
				if err := txn.SetEntry(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: replay commit log: record %d of %d: %w", i+1, len(records), err)
		}
	}
	return nil
}

// FileValueMin is the size from which a durable store keeps an offer or a
// result in a file of its own (FileWriter writes such files as the store
// does); a smaller one is made durable in its commit log's record
// (LogWriter).
const FileValueMin = fileBlobMin

// LogWriter appends records to a commit log of its own, the way a durable
// store's commit queue writes its log: each record in one write of whole
// blocks, returning once it is on the disk (O_DIRECT|O_DSYNC, through AIO
// where the kernel and the file system take them). kith bench times it as
// the disk's floor for making a payload under FileValueMin durable. Not
// safe for concurrent use.
type LogWriter struct {
	l *commitLog
}

// NewLogWriter creates a commit log in dir, which must hold none.
func NewLogWriter(dir string) (*LogWriter, error) {
	if _, err := os.Stat(filepath.Join(dir, logFileName)); !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("store: a log writer in %s: a commit log is there already (%v)", dir, err)
	}
	if err := createCommitLog(dir); err != nil {
		return nil, err
	}
	l, _, err := openCommitLog(dir)
	if err != nil {
		return nil, err
	}
	return &LogWriter{l: l}, nil
}

// Append writes b as the body of one record and returns once it is
// durable.
func (w *LogWriter) Append(b []byte) error {
	_, err := w.l.write([]byte{kindBatch}, b)
	return err
}

// Rewind makes the next record start at the front of the log, over the
// blocks written before, as a store's log starts over at each checkpoint:
// a store's log writes into blocks it has written before, save when it
// grows.
func (w *LogWriter) Rewind() { w.l.off = logDataStart }

// Close closes the log's file; dir and the log stay.
func (w *LogWriter) Close() error { return w.l.close() }
