package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyDir copies the regular files of src, and of its subdirectories, to
// dst: a snapshot of a closed store.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	mustNoErr(t, filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	}))
}

// crash takes dir, a closed durable store: it snapshots dir, reopens the store there, runs writes on it and closes
// it, then returns a directory holding what a crash that lost every write
// badger had not synced would leave (badger's files as in the snapshot,
// the log as the writes left it: each returned, so each is synced), and
// the snapshot itself.
func crash(t *testing.T, dir string, writes func(s *Store)) (lost, checkpointed string) {
	t.Helper()
	checkpointed = t.TempDir()
	copyDir(t, dir, checkpointed)
	s := openAt(t, dir, Options{})
	writes(s)
	log, err := os.ReadFile(filepath.Join(dir, logFileName))
	mustNoErr(t, err)
	mustNoErr(t, s.Close())
	lost = t.TempDir()
	copyDir(t, checkpointed, lost)
	mustNoErr(t, os.WriteFile(filepath.Join(lost, logFileName), log, 0o600))
	return lost, checkpointed
}

func readLog(t *testing.T, dir string) (batches [][]byte, next uint64, end int64, size int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, logFileName))
	mustNoErr(t, err)
	_, first, err := parseLogHeader(data)
	mustNoErr(t, err)
	batches, next, end = parseLogRecords(data, first)
	return batches, next, end, len(data)
}

func deleteMeta(t *testing.T, s *Store, key string) {
	t.Helper()
	mustNoErr(t, s.update(nil, func(txn *wtxn) error { return txn.Delete(metaKey(key)) }))
}

func getMetaOK(t *testing.T, s *Store, key string) ([]byte, bool) {
	t.Helper()
	v, err := s.GetMeta(key)
	if errors.Is(err, ErrNotFound) {
		return nil, false
	}
	mustNoErr(t, err)
	return v, true
}

// TestCommitLogReplaysLostWrites: badger loses every write it had not
// synced (here: its files are put back as they were at the last
// checkpoint), and the log brings them all back at open, in order.
func TestCommitLogReplaysLostWrites(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.PutMeta("kept", []byte("before")))
	mustNoErr(t, s.PutMeta("deleted", []byte("before")))
	mustNoErr(t, s.Close())
	big := bytes.Repeat([]byte("x"), 200<<10) // several blocks in one record
	lost, checkpointed := crash(t, dir, func(s *Store) {
		mustNoErr(t, s.PutMeta("new", []byte("one")))
		mustNoErr(t, s.PutMeta("new", []byte("two")))
		mustNoErr(t, s.PutMeta("kept", []byte("after")))
		deleteMeta(t, s, "deleted")
		mustNoErr(t, s.PutMeta("big", big))
	})
	before := openAt(t, checkpointed, Options{})
	if _, ok := getMetaOK(t, before, "new"); ok {
		t.Fatal("the snapshot already holds the writes: the test shows nothing")
	}
	mustNoErr(t, before.Close())

	r := openAt(t, lost, Options{})
	for key, want := range map[string]string{"new": "two", "kept": "after", "big": string(big)} {
		if got, ok := getMetaOK(t, r, key); !ok || string(got) != want {
			t.Errorf("%s after replay: %.20q (found %v), want %.20q", key, got, ok, want)
		}
	}
	if _, ok := getMetaOK(t, r, "deleted"); ok {
		t.Error("a logged delete was not replayed")
	}
	// Open checkpointed and started the log over; writes go on from there.
	if batches, _, _, _ := readLog(t, lost); len(batches) != 0 {
		t.Errorf("log after open holds %d records, want 0", len(batches))
	}
	mustNoErr(t, r.PutMeta("later", []byte("x")))
	r = reopen(t, r, lost, Options{})
	if got, ok := getMetaOK(t, r, "later"); !ok || string(got) != "x" {
		t.Errorf("write after a replay lost: %q %v", got, ok)
	}
}

// TestCommitLogTornRecord: a record cut short by a crash (it was never
// acknowledged) is dropped with everything after it; the records before it
// replay, and the log goes on at the dropped record's sequence number.
func TestCommitLogTornRecord(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.Close())
	var endA int64
	lost, _ := crash(t, dir, func(s *Store) {
		mustNoErr(t, s.PutMeta("a", []byte("1")))
		_, _, endA, _ = readLog(t, dir)
		mustNoErr(t, s.PutMeta("b", []byte("2")))
	})
	path := filepath.Join(lost, logFileName)
	torn, err := os.ReadFile(path)
	mustNoErr(t, err)
	torn[endA+logRecordHeader+2] ^= 0xff // inside b's record
	mustNoErr(t, os.WriteFile(path, torn, 0o600))
	if batches, next, _, _ := readLog(t, lost); len(batches) != 1 || next != 3 {
		t.Fatalf("torn log parses to %d records, next %d; want 1 and 3", len(batches), next)
	}
	r := openAt(t, lost, Options{})
	if got, ok := getMetaOK(t, r, "a"); !ok || string(got) != "1" {
		t.Errorf("record before the torn one: %q %v", got, ok)
	}
	if _, ok := getMetaOK(t, r, "b"); ok {
		t.Error("the torn record was applied")
	}
	mustNoErr(t, r.PutMeta("c", []byte("3")))
	if batches, next, _, _ := readLog(t, lost); len(batches) != 1 || next != 4 {
		t.Errorf("after open and one write: %d records, next %d; want 1 and 4", len(batches), next)
	}
	r = reopen(t, r, lost, Options{})
	if got, ok := getMetaOK(t, r, "c"); !ok || string(got) != "3" {
		t.Errorf("write after the torn record: %q %v", got, ok)
	}
}

// TestCommitLogCycles: a log that checkpoints and starts over many times
// never replays what an earlier cycle left behind in its blocks. Every
// record here is one block long, so records of one cycle start where those
// of the cycle before did, and no zeroes follow the last one: only the
// sequence numbers tell the stale records from the live ones.
func TestCommitLogCycles(t *testing.T) {
	s, dir := openTest(t, Options{})
	s.commits.log.checkpointAt = 64 << 10
	// fill returns a value for metaKey("filler") that makes a batch of
	// before and that write one block long.
	fill := func(before ...logOp) []byte {
		for n := 0; n < logBlock; n++ {
			v := make([]byte, n)
			body := binary.AppendUvarint([]byte{kindBatch}, uint64(len(before)+1))
			for _, op := range before {
				body = appendLogOp(body, op)
			}
			body = appendLogOp(body, logOp{key: metaKey("filler"), value: v})
			if logRecordHeader+len(body) == logBlock {
				return v
			}
		}
		t.Fatal("no filler makes a record one block long")
		return nil
	}
	filler := fill()
	for range 100 {
		mustNoErr(t, s.PutMeta("filler", filler))
	}
	if s.commits.log.gen < 5 {
		t.Fatalf("log generation %d after 100 writes of a block: it did not cycle", s.commits.log.gen)
	}
	nextCycle := func() {
		for gen := s.commits.log.gen; s.commits.log.gen == gen; {
			mustNoErr(t, s.PutMeta("filler", filler))
		}
	}
	// One cycle writes "gone" in its third record; the next deletes it in
	// its first and stops after its second, so that the stale third record
	// follows the log's end.
	nextCycle()
	mustNoErr(t, s.PutMeta("filler", filler))
	mustNoErr(t, s.PutMeta("filler", filler))
	stale := fill(logOp{key: metaKey("gone"), value: []byte("stale")})
	mustNoErr(t, s.update(nil, func(txn *wtxn) error {
		return errors.Join(txn.Set(metaKey("gone"), []byte("stale")), txn.Set(metaKey("filler"), stale))
	}))
	nextCycle()
	if s.commits.log.off != logDataStart {
		t.Fatalf("new cycle at %d, want %d", s.commits.log.off, logDataStart)
	}
	deleted := fill(logOp{del: true, key: metaKey("gone")})
	mustNoErr(t, s.update(nil, func(txn *wtxn) error {
		return errors.Join(txn.Delete(metaKey("gone")), txn.Set(metaKey("filler"), deleted))
	}))
	mustNoErr(t, s.PutMeta("filler", filler))
	mustNoErr(t, s.Close())

	batches, _, end, _ := readLog(t, dir)
	if len(batches) != 2 || end != logDataStart+2*logBlock {
		t.Fatalf("log holds %d records ending at %d, want 2 ending at %d", len(batches), end, logDataStart+2*logBlock)
	}
	data, err := os.ReadFile(filepath.Join(dir, logFileName))
	mustNoErr(t, err)
	if !bytes.Contains(data[end:end+logBlock], []byte("stale")) {
		t.Fatal("the earlier cycle's record of gone does not follow the log's end: the test shows nothing")
	}
	s = openAt(t, dir, Options{})
	if v, ok := getMetaOK(t, s, "gone"); ok {
		t.Errorf("gone is back (%q): a stale record was replayed", v)
	}
	if v, ok := getMetaOK(t, s, "filler"); !ok || !bytes.Equal(v, filler) {
		t.Errorf("filler after cycles: %d bytes, found %v", len(v), ok)
	}
}

// TestCommitLogAbort: a batch whose badger commit failed after its record
// was written is cancelled by an abort record, and replay leaves it out.
func TestCommitLogAbort(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.Close())
	l, records, err := openCommitLog(dir)
	mustNoErr(t, err)
	if len(records) != 0 {
		t.Fatalf("fresh log holds %d records", len(records))
	}
	batch := func(key, value string) []byte {
		rec := appendLogOp(nil, logOp{key: metaKey(key), value: []byte(value)})
		return append(binary.AppendUvarint([]byte{kindBatch}, 1), rec...)
	}
	seq, err := l.write(batch("failed", "x"))
	mustNoErr(t, err)
	mustNoErr(t, l.abort(seq))
	_, err = l.write(batch("committed", "y"))
	mustNoErr(t, err)
	mustNoErr(t, l.close())

	s = openAt(t, dir, Options{})
	if _, ok := getMetaOK(t, s, "failed"); ok {
		t.Error("an aborted batch was replayed")
	}
	if v, ok := getMetaOK(t, s, "committed"); !ok || string(v) != "y" {
		t.Errorf("the batch after the abort: %q %v", v, ok)
	}
}

// TestCommitLogHeader: a torn write of the newer header slot leaves the
// older one in force; a log with no valid header is refused, and the store
// with it, with nothing changed.
func TestCommitLogHeader(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.PutMeta("k", []byte("v")))
	mustNoErr(t, s.Close())
	path := filepath.Join(dir, logFileName)
	data, err := os.ReadFile(path)
	mustNoErr(t, err)
	gen, _, err := parseLogHeader(data)
	mustNoErr(t, err)
	data[(gen%2)*logBlock+9] ^= 1 // the newer slot's generation
	mustNoErr(t, os.WriteFile(path, data, 0o600))
	if g, _, err := parseLogHeader(data); err != nil || g != gen-1 {
		t.Fatalf("with the newer slot torn: generation %d, %v; want %d", g, err, gen-1)
	}
	s = openAt(t, dir, Options{})
	if v, ok := getMetaOK(t, s, "k"); !ok || string(v) != "v" {
		t.Errorf("after a torn header: %q %v", v, ok)
	}
	mustNoErr(t, s.Close())

	data, err = os.ReadFile(path)
	mustNoErr(t, err)
	data[8] ^= 1
	data[logBlock+8] ^= 1
	mustNoErr(t, os.WriteFile(path, data, 0o600))
	_, err = Open(dir, Options{})
	wantErr(t, err, ErrCorrupt)
	if !strings.Contains(err.Error(), "commit log") {
		t.Errorf("error does not name the commit log: %v", err)
	}
	after, err := os.ReadFile(path)
	mustNoErr(t, err)
	if !bytes.Equal(after, data) {
		t.Error("a refused open changed the log")
	}
}

// TestCommitLogOnlyWhenDurable: NoSync and in-memory stores have no log,
// and a durable store's commit writes one record per batch.
func TestCommitLogOnlyWhenDurable(t *testing.T) {
	s, dir := openTest(t, Options{NoSync: true})
	if s.commits.log != nil {
		t.Error("a NoSync store has a commit log")
	}
	if _, err := os.Stat(filepath.Join(dir, logFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a NoSync store wrote %s: %v", logFileName, err)
	}
	m, err := OpenInMemory(Options{})
	mustNoErr(t, err)
	defer m.Close()
	if m.commits.log != nil {
		t.Error("an in-memory store has a commit log")
	}

	d, dir := openTest(t, Options{})
	mustNoErr(t, d.PutMeta("k", []byte("v")))
	batches, _, _, _ := readLog(t, dir)
	if len(batches) != 1 {
		t.Fatalf("log holds %d records after one write, want 1", len(batches))
	}
	ops, err := decodeLogBatch(batches[0])
	mustNoErr(t, err)
	if len(ops) != 1 || !bytes.Equal(ops[0].key, metaKey("k")) || string(ops[0].value) != "v" {
		t.Errorf("logged ops: %+v", ops)
	}
}

// TestLogOpRoundTrip: what appendLogOp writes, decodeLogBatch reads back.
func TestLogOpRoundTrip(t *testing.T) {
	ops := []logOp{
		{key: []byte("a"), value: []byte("1")},
		{key: []byte("b"), value: nil, userMeta: metaFileBlob, expiresAt: 1 << 40},
		{del: true, key: []byte("c")},
		{key: []byte("d"), value: bytes.Repeat([]byte{0}, 1000)},
	}
	body := binary.AppendUvarint([]byte{kindBatch}, uint64(len(ops)))
	for _, op := range ops {
		body = appendLogOp(body, op)
	}
	got, err := decodeLogBatch(body)
	mustNoErr(t, err)
	if len(got) != len(ops) {
		t.Fatalf("%d ops back, want %d", len(got), len(ops))
	}
	for i := range ops {
		w, g := ops[i], got[i]
		if w.del != g.del || !bytes.Equal(w.key, g.key) || !bytes.Equal(w.value, g.value) ||
			w.userMeta != g.userMeta || w.expiresAt != g.expiresAt {
			t.Errorf("op %d: %+v, want %+v", i, g, w)
		}
	}
	for cut := 1; cut < len(body); cut += 97 {
		if _, err := decodeLogBatch(body[:cut]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("body cut at %d: %v, want ErrCorrupt", cut, err)
		}
	}
}

// FuzzCommitLog: parsing any bytes as a log never panics, stays inside the
// data, and every batch it returns decodes or is ErrCorrupt.
func FuzzCommitLog(f *testing.F) {
	empty := make([]byte, logDataStart)
	putLogSlot(empty[logBlock:], 1, 1)
	f.Add(empty)
	dir := f.TempDir()
	l, _, err := openCommitLog(dir)
	if err != nil {
		f.Fatal(err)
	}
	body := append(binary.AppendUvarint([]byte{kindBatch}, 2),
		appendLogOp(appendLogOp(nil, logOp{key: []byte("k"), value: []byte("v")}), logOp{del: true, key: []byte("d")})...)
	seq, err := l.write(body)
	if err != nil {
		f.Fatal(err)
	}
	if err := l.abort(seq); err != nil {
		f.Fatal(err)
	}
	if _, err := l.write(body); err != nil {
		f.Fatal(err)
	}
	if err := l.close(); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(dir, logFileName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed[:logDataStart+logBlock])
	f.Fuzz(func(t *testing.T, data []byte) {
		_, first, err := parseLogHeader(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("header error not ErrCorrupt: %v", err)
			}
			first = 1
			if len(data) < logDataStart {
				return
			}
		}
		batches, next, end := parseLogRecords(data, first)
		if end < logDataStart || end > int64(len(data)) || next < first {
			t.Fatalf("end %d of %d bytes, next %d from %d", end, len(data), next, first)
		}
		for _, b := range batches {
			if _, err := decodeLogBatch(b); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("batch error not ErrCorrupt: %v", err)
			}
		}
	})
}

// TestCommitLogNoSyncOpen: a store opened without sync applies the log a
// durable run left and removes it, so that its own unlogged writes are not
// undone by that log when the store next opens with sync.
func TestCommitLogNoSyncOpen(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.Close())
	lost, _ := crash(t, dir, func(s *Store) { mustNoErr(t, s.PutMeta("k", []byte("logged"))) })

	n := openAt(t, lost, Options{NoSync: true})
	if v, ok := getMetaOK(t, n, "k"); !ok || string(v) != "logged" {
		t.Errorf("NoSync open did not replay the log: %q %v", v, ok)
	}
	if _, err := os.Stat(filepath.Join(lost, logFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("NoSync open left the log: %v", err)
	}
	mustNoErr(t, n.PutMeta("k", []byte("unlogged")))
	d := reopen(t, n, lost, Options{})
	if v, ok := getMetaOK(t, d, "k"); !ok || string(v) != "unlogged" {
		t.Errorf("after a NoSync run and a durable open: %q %v, want the NoSync run's write", v, ok)
	}
}

// TestLoggedOpsAsEncoded: a transaction's record, with its large values
// as parts of their own (wtxn.parts), is byte for byte what appendLogOp
// gives the same ops, and decodes back to them.
func TestLoggedOpsAsEncoded(t *testing.T) {
	ops := []logOp{
		{key: []byte("a"), value: []byte("small")},
		{key: []byte("big"), value: pattern(logValuePart, 1), userMeta: 1, expiresAt: 7},
		{key: []byte("big2"), value: pattern(3*logValuePart+5, 2)}, // two large in a row
		{del: true, key: []byte("gone")},
		{key: []byte("under"), value: pattern(logValuePart-1, 3), userMeta: 2},
		{key: []byte("big3"), value: pattern(logValuePart, 4), expiresAt: 1 << 40},
		{key: []byte("empty")},
	}
	tx := &wtxn{logging: true}
	var want []byte
	for _, op := range ops {
		tx.record(op)
		want = appendLogOp(want, op)
	}
	if len(tx.parts) == 0 {
		t.Fatal("no value went into the record as a part of its own")
	}
	head := append([]byte{kindBatch}, binary.AppendUvarint(nil, uint64(len(ops)))...)
	got := bytes.Join(tx.logged(head), nil)
	if !bytes.Equal(got, append(head, want...)) {
		t.Fatalf("record of %d bytes differs from the %d appendLogOp gives", len(got), len(head)+len(want))
	}
	back, err := decodeLogBatch(got)
	mustNoErr(t, err)
	if len(back) != len(ops) {
		t.Fatalf("decoded %d ops, want %d", len(back), len(ops))
	}
	for i, op := range ops {
		b := back[i]
		if b.del != op.del || !bytes.Equal(b.key, op.key) || !bytes.Equal(b.value, op.value) || b.userMeta != op.userMeta || b.expiresAt != op.expiresAt {
			t.Fatalf("op %d decoded as (del %v, key %q, %d-byte value, meta %d, expires %d), want (%v, %q, %d, %d, %d)",
				i, b.del, b.key, len(b.value), b.userMeta, b.expiresAt, op.del, op.key, len(op.value), op.userMeta, op.expiresAt)
		}
	}
}

// A LogWriter's records are commit log records, durable once Append
// returns; after Rewind the next goes over the first, in blocks the file
// holds already.
func TestLogWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := NewLogWriter(dir)
	mustNoErr(t, err)
	var want [][]byte
	for i, n := range []int{100, 5000, 70000} {
		b := pattern(n, byte(i))
		mustNoErr(t, w.Append(b))
		want = append(want, append([]byte{kindBatch}, b...))
	}
	path := filepath.Join(dir, logFileName)
	_, _, got, _, _, err := readCommitLog(path)
	mustNoErr(t, err)
	if len(got) != len(want) {
		t.Fatalf("read %d records back, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d reads back otherwise", i)
		}
	}
	before, err := os.Stat(path)
	mustNoErr(t, err)
	w.Rewind()
	again := pattern(5000, 9)
	mustNoErr(t, w.Append(again))
	mustNoErr(t, w.Close())
	after, err := os.Stat(path)
	mustNoErr(t, err)
	if after.Size() != before.Size() {
		t.Errorf("the log grew from %d to %d bytes after Rewind", before.Size(), after.Size())
	}
	data, err := os.ReadFile(path)
	mustNoErr(t, err)
	body := data[logDataStart+logRecordHeader:]
	if body[0] != kindBatch || !bytes.Equal(body[1:1+len(again)], again) {
		t.Error("the record after Rewind is not at the front of the log")
	}
	if _, err := NewLogWriter(dir); err == nil {
		t.Error("a second log writer took a directory that holds a commit log")
	}
}
