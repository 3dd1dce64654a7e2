package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/protocol"
)

// blobFiles lists the blob directory of the disk store in dir.
func blobFiles(t *testing.T, dir string) []string { return filesIn(t, dir, blobDirName) }

// filesIn lists the names in the store directory dir's subdirectory sub.
func filesIn(t *testing.T, dir, sub string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// offersWithoutTables writes requester delegations with value as their
// offer, as many as would fill both of badger's memtables twice over
// inline (a write then waits for a memtable to be flushed to a table),
// and checks that badger wrote no table: the values went elsewhere. It
// returns how many it wrote and the last one's ID.
func offersWithoutTables(t *testing.T, s *Store, value []byte) (int, protocol.DelegationID) {
	t.Helper()
	n := 2 * numMemtables * memTableSize / len(value)
	var last protocol.DelegationID
	for range n {
		last = protocol.NewDelegationID()
		mustNoErr(t, s.CreateDelegation(Delegation{ID: last, Role: RoleRequester, Offer: value}))
	}
	if tables := s.db.Tables(); len(tables) > 0 {
		t.Fatalf("%d offers of %d bytes: badger wrote %d tables; want none, the values out of its tree", n, len(value), len(tables))
	}
	return n, last
}

// checkAcrossRestart runs check on s, then on s closed and reopened, which
// it returns.
func checkAcrossRestart(t *testing.T, s *Store, dir string, check func(*Store)) *Store {
	t.Helper()
	check(s)
	s = reopen(t, s, dir, Options{})
	check(s)
	return s
}

// damageTheOne damages, with c, the one file in the store directory
// dir's subdirectory sub, which must hold only that one.
func damageTheOne(t *testing.T, dir, sub string, c damage) {
	t.Helper()
	files := filesIn(t, dir, sub)
	if len(files) != 1 {
		t.Fatalf("%s holds %q, want one file", sub, files)
	}
	mustNoErr(t, c.damage(filepath.Join(dir, sub, files[0])))
}

// wantValuesCorrupt checks that the provider delegation id's values read
// as ErrCorrupt, and that its record without them still reads.
func wantValuesCorrupt(t *testing.T, s *Store, id protocol.DelegationID) {
	t.Helper()
	_, err := s.GetDelegation(RoleProvider, id)
	wantErr(t, err, ErrCorrupt)
	_, err = s.DelegationInfo(RoleProvider, id)
	mustNoErr(t, err)
}

// wantBlobs fails unless the delegation's offer and result read back as
// offer and result.
func wantBlobs(t *testing.T, s *Store, role Role, id protocol.DelegationID, offer, result []byte) {
	t.Helper()
	d, err := s.GetDelegation(role, id)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, offer) || !bytes.Equal(d.Result, result) {
		t.Fatalf("%s/%s: read back %d and %d bytes, not the %d and %d written", role, id, len(d.Offer), len(d.Result), len(offer), len(result))
	}
}

// damage is a way to damage the file at a path: remove it, cut it to
// short bytes, or flip a bit in its middle.
type damage struct {
	name   string
	damage func(path string) error
}

func damages(short int64) []damage {
	return []damage{
		{"missing", os.Remove},
		{"short", func(p string) error { return os.Truncate(p, short) }},
		{"altered", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o600)
		}},
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*31)
	}
	return b
}

// TestMidSizeValuesOutOfTheTree: offers and results from fileBlobMin
// (256 KiB from schema 8; 128 KiB in schema 7, 256 KiB before) go to files
// of their own and only a reference into badger's tree (smaller ones from
// 4 KiB to segments: TestMidSizeValuesInSegments). Inline, 128 KiB values filled a memtable
// every 64 of them, and each flush wrote them again into a table (and
// compactions again after that).
func TestMidSizeValuesOutOfTheTree(t *testing.T) {
	s, dir := openTest(t, Options{})
	value := pattern(fileBlobMin, 1)
	n, last := offersWithoutTables(t, s, value)
	if got := blobFiles(t, dir); len(got) != n {
		t.Fatalf("%d offers of %d bytes: %d files", n, len(value), len(got))
	}
	d, err := s.GetDelegation(RoleRequester, last)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, value) {
		t.Fatalf("offer read back: %d bytes, not the %d written", len(d.Offer), len(value))
	}
}

// TestLargeValuesInFiles: an offer and a result of fileBlobMin bytes or
// more each go to a file of their own, not into badger, and read back the
// same, also after a restart; smaller ones stay inline; the in-memory store
// keeps every value inline.
func TestLargeValuesInFiles(t *testing.T) {
	s, dir := openTest(t, Options{})
	id := protocol.NewDelegationID()
	offer, result := pattern(1<<20, 1), pattern(fileBlobMin, 2)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: offer}))
	if got := blobFiles(t, dir); len(got) != 1 {
		t.Fatalf("after a 1 MiB offer, blob files %q, want one", got)
	}
	_, err := s.Transition(RoleRequester, id, protocol.StateCompleted, Event{Type: "result"}, func(d *Delegation) {
		d.Result = result
	})
	mustNoErr(t, err)
	if got := blobFiles(t, dir); len(got) != 2 {
		t.Fatalf("after a result of %d bytes, blob files %q, want two", len(result), got)
	}
	err = s.view(func(txn *wtxn) error {
		for _, name := range []string{blobOffer, blobResult} {
			item, err := txn.Get(blobKey(RoleRequester, id, name))
			if err != nil {
				return err
			}
			if item.UserMeta()&metaFileBlob == 0 || item.ValueSize() > 256 {
				t.Errorf("%s: user meta %#x, %d bytes in badger; want a file reference", name, item.UserMeta(), item.ValueSize())
			}
		}
		return nil
	})
	mustNoErr(t, err)

	small := pattern(fileBlobMin-1, 3)
	id2 := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id2, Role: RoleProvider, Offer: small, Result: small}))
	if got := blobFiles(t, dir); len(got) != 2 {
		t.Fatalf("a value under %d bytes went to a file: %q", fileBlobMin, got)
	}

	checkAcrossRestart(t, s, dir, func(s *Store) {
		wantBlobs(t, s, RoleRequester, id, offer, result)
		wantBlobs(t, s, RoleProvider, id2, small, small)
	})
	if got := blobFiles(t, dir); len(got) != 2 {
		t.Fatalf("after the restart, blob files %q, want the same two", got)
	}

	mem, err := OpenInMemory(Options{})
	mustNoErr(t, err)
	defer mem.Close()
	mustNoErr(t, mem.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: pattern(300<<10, 4)}))
	d, err := mem.GetDelegation(RoleRequester, id)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, pattern(300<<10, 4)) {
		t.Fatal("in-memory store: offer read back wrong")
	}
}

// TestBlobFileDamage: a value's file that is missing, shorter or altered
// reads as ErrCorrupt, never as a wrong value.
func TestBlobFileDamage(t *testing.T) {
	for _, c := range damages(fileBlobMin / 2) {
		t.Run(c.name, func(t *testing.T) {
			s, dir := openTest(t, Options{})
			id := protocol.NewDelegationID()
			mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: pattern(fileBlobMin+7, 5)}))
			damageTheOne(t, dir, blobDirName, c)
			wantValuesCorrupt(t, s, id)
		})
	}
}

// TestBlobFileSweep: at open, the files no blob key refers to go (a write
// that never committed, a value since replaced); referenced files, and
// files kith did not name, stay.
func TestBlobFileSweep(t *testing.T) {
	s, dir := openTest(t, Options{})
	id := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: pattern(fileBlobMin, 6)}))
	first := blobFiles(t, dir)
	// The offer replaced: its first file stays while the store is open.
	_, err := s.UpdateDelegation(RoleRequester, id, func(d *Delegation) error {
		d.Offer = pattern(fileBlobMin, 7)
		return nil
	})
	mustNoErr(t, err)
	if got := blobFiles(t, dir); len(got) != 2 {
		t.Fatalf("after replacing the offer, blob files %q, want two", got)
	}
	// A file written for a key whose transaction never committed.
	orphanName, err := fileName(blobKey(RoleProvider, protocol.NewDelegationID(), blobResult))
	mustNoErr(t, err)
	stranger := "notes.txt"
	for _, n := range []string{orphanName, stranger} {
		mustNoErr(t, os.WriteFile(filepath.Join(dir, blobDirName, n), []byte("x"), 0o600))
	}

	s = reopen(t, s, dir, Options{})
	got := blobFiles(t, dir)
	if slices.Contains(got, first[0]) || slices.Contains(got, orphanName) || !slices.Contains(got, stranger) || len(got) != 2 {
		t.Fatalf("after the sweep, blob files %q: want the new offer's and %q only", got, stranger)
	}
	d, err := s.GetDelegation(RoleRequester, id)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, pattern(fileBlobMin, 7)) {
		t.Fatal("the replacing offer did not survive the sweep")
	}
}

// TestBlobFileBadReference: a blob key whose file reference does not decode
// makes that value read as ErrCorrupt; the store still opens, and the sweep
// leaves the file alone.
func TestBlobFileBadReference(t *testing.T) {
	s, dir := openTest(t, Options{})
	id := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: pattern(fileBlobMin, 9)}))
	files := blobFiles(t, dir)
	mustNoErr(t, s.update(nil, func(txn *wtxn) error {
		return txn.SetEntry(badger.NewEntry(blobKey(RoleRequester, id, blobOffer), []byte{0x7f}).WithMeta(metaFileBlob))
	}))
	s = reopen(t, s, dir, Options{})
	if got := blobFiles(t, dir); !slices.Equal(got, files) {
		t.Fatalf("blob files after the sweep %q, want %q kept", got, files)
	}
	_, err := s.GetDelegation(RoleRequester, id)
	wantErr(t, err, ErrCorrupt)
	_, err = s.DelegationInfo(RoleRequester, id)
	mustNoErr(t, err)
}

// TestInlineLargeValuesStillRead: a large value that a schema 4 store kept
// in badger reads as before in a store that keeps new ones in files.
func TestInlineLargeValuesStillRead(t *testing.T) {
	s, dir := openTest(t, Options{})
	files := s.files
	s.files = nil // write as schema 4 did
	id := protocol.NewDelegationID()
	offer := pattern(1<<20, 8)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: offer}))
	s.files = files
	setSchemaVersion(t, s, 4)
	s = reopen(t, s, dir, Options{})
	if got := blobFiles(t, dir); len(got) != 0 {
		t.Fatalf("blob files %q, want none", got)
	}
	d, err := s.GetDelegation(RoleRequester, id)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, offer) {
		t.Fatal("an inline offer read back wrong")
	}
	var v uint64
	mustNoErr(t, s.view(func(txn *wtxn) (err error) {
		v, err = getUint64(txn, []byte(keySchema))
		return err
	}))
	if v != schemaVersion {
		t.Errorf("schema version %d after open, want %d", v, schemaVersion)
	}
}

func TestFileRefRoundTrip(t *testing.T) {
	name, err := fileName(blobKey(RoleProvider, protocol.NewDelegationID(), blobOffer))
	mustNoErr(t, err)
	r := fileRef{size: 1 << 24, crc: 0xdeadbeef, name: name}
	for _, size := range []uint64{fileRefMin - 1, MaxValueSize + 1} {
		if _, err := decodeFileRef(fileRef{size: size, name: name}.encode()); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a reference to %d bytes: %v, want ErrCorrupt", size, err)
		}
	}
	got, err := decodeFileRef(r.encode())
	if err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, b := range [][]byte{nil, {0x02}, {fileRefV1}, {fileRefV1, 0x80}, append(fileRef{size: 1, name: "../x"}.encode(), 'y')} {
		if _, err := decodeFileRef(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeFileRef(%q): %v, want ErrCorrupt", b, err)
		}
	}
}

func FuzzDecodeFileRef(f *testing.F) {
	name, err := fileName(blobKey(RoleRequester, protocol.NewDelegationID(), blobResult))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fileRef{size: 300 << 10, crc: 7, name: name}.encode())
	f.Add([]byte{fileRefV1, 0x01, 0, 0, 0, 0})
	f.Add(fileRef{size: MaxValueSize, name: name}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeFileRef(b)
		if err != nil {
			return
		}
		if filepath.Base(r.name) != r.name || !validFileName(r.name) {
			t.Fatalf("decoded a name that is not a plain blob file name: %q", r.name)
		}
		again, err := decodeFileRef(r.encode())
		if err != nil || again != r {
			t.Fatalf("round trip: %+v, then %+v (%v)", r, again, err)
		}
	})
}

// TestBlobFileWritePaths: values of sizes that are not whole blocks, and of
// more than one direct-write piece, read back whole from files of their
// exact size, written directly (where the file system takes it) and
// through the page cache.
func TestBlobFileWritePaths(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		s, dir := openTest(t, Options{})
		s.files.buffered.Store(buffered)
		for i, n := range []int{fileBlobMin + 1, 2*fileBlobMin + 7, directChunk + directBlock + 5, 3 * directChunk} {
			id := protocol.NewDelegationID()
			v := pattern(n, byte(i))
			mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: v}))
			d, err := s.GetDelegation(RoleRequester, id)
			mustNoErr(t, err)
			if !bytes.Equal(d.Offer, v) {
				t.Fatalf("buffered %v, %d bytes: read back wrong", buffered, n)
			}
		}
		for _, name := range blobFiles(t, dir) {
			st, err := os.Stat(filepath.Join(dir, blobDirName, name))
			mustNoErr(t, err)
			if st.Size()%directBlock == 0 && st.Size() != 3*directChunk {
				t.Errorf("buffered %v: a file of %d bytes: padding left in it", buffered, st.Size())
			}
		}
		if got := len(blobFiles(t, dir)); got != 4 {
			t.Errorf("buffered %v: %d files, want 4", buffered, got)
		}
		if !buffered && s.files.buffered.Load() {
			t.Logf("the file system of %s refused direct I/O: both rounds wrote through the page cache", dir)
		}
	}
}

// TestFileWriter: the writer kith bench times (the store's own) writes
// exactly the bytes it is given, through the page cache and past it
// (where the file system takes direct I/O), in files of their exact size:
// whole blocks or not, from memory aligned to a block (written from as it
// is) or not (through the aligned buffer).
func TestFileWriter(t *testing.T) {
	dir := t.TempDir()
	w := NewFileWriter()
	t.Cleanup(func() { aioOff.Store(false) })
	for _, blocking := range []bool{false, true} {
		// Direct writes go through AIO where the kernel has it
		// (aio_linux.go), and the blocking way where it does not.
		aioOff.Store(blocking)
		for i, n := range []int{1, directBlock, directBlock + 5, 3 * directBlock, directChunk + directBlock + 5} {
			aligned := alignedBuffer(n)
			copy(aligned, pattern(n, byte(i)))
			unaligned := make([]byte, n+1)[1:]
			copy(unaligned, aligned)
			for _, v := range [][]byte{aligned, unaligned} {
				for _, direct := range []bool{false, true} {
					path := filepath.Join(dir, fmt.Sprintf("%d-%v-%v-%p", n, direct, blocking, &v[0]))
					writeAndCheck(t, w, path, v, direct)
				}
			}
		}
	}
	if err := w.WriteSynced(filepath.Join(dir, "exists"), []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSynced(filepath.Join(dir, "exists"), []byte("x"), false); err == nil {
		t.Error("a write over an existing file succeeded; it must create a new one")
	}
}

// writeAndCheck writes v to a new file at path with w, and reads it back.
func writeAndCheck(t *testing.T, w *FileWriter, path string, v []byte, direct bool) {
	t.Helper()
	n := len(v)
	err := w.WriteSynced(path, v, direct)
	if direct && errors.Is(err, errors.ErrUnsupported) {
		t.Logf("the file system of %s refused direct I/O", filepath.Dir(path))
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused direct write left %s behind: %v", path, err)
		}
		return
	}
	mustNoErr(t, err)
	got, err := os.ReadFile(path)
	mustNoErr(t, err)
	if !bytes.Equal(got, v) {
		t.Errorf("%d bytes, direct %v: read back %d bytes, not what was written", n, direct, len(got))
	}
}

// TestListingReadsRecords: a listing reads no offer, and a result only up
// to ListResultMax bytes, wherever it is stored (inline, in a segment, in
// a file of its own); a larger one is left out and said to be. Listed
// without Listing, every delegation comes whole.
func TestListingReadsRecords(t *testing.T) {
	s, dir := openTest(t, Options{})
	results := map[protocol.DelegationID][]byte{}
	for i, n := range []int{100, ListResultMax, ListResultMax + 1, 200 << 10, 1 << 20} {
		id := protocol.NewDelegationID()
		results[id] = pattern(n, byte(i))
		mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: pattern(1<<20, 9), Result: results[id]}))
	}
	check := func(s *Store) {
		ds, err := s.ListDelegations(DelegationFilter{Listing: true})
		mustNoErr(t, err)
		if len(ds) != len(results) {
			t.Fatalf("listed %d, want %d", len(ds), len(results))
		}
		for _, d := range ds {
			want := results[d.ID]
			switch {
			case d.Offer != nil:
				t.Fatalf("a listing read a %d-byte offer", len(d.Offer))
			case len(want) <= ListResultMax && (d.ResultLeftOut || !bytes.Equal(d.Result, want)):
				t.Fatalf("result of %d bytes: listed %d bytes, left out %v; want it whole", len(want), len(d.Result), d.ResultLeftOut)
			case len(want) > ListResultMax && (!d.ResultLeftOut || d.Result != nil):
				t.Fatalf("result of %d bytes: listed %d bytes, left out %v; want it left out", len(want), len(d.Result), d.ResultLeftOut)
			}
		}
		ds, err = s.ListDelegations(DelegationFilter{})
		mustNoErr(t, err)
		for _, d := range ds {
			if d.ResultLeftOut || !bytes.Equal(d.Result, results[d.ID]) || len(d.Offer) != 1<<20 {
				t.Fatalf("a whole listing gave a result of %d bytes (of %d) and an offer of %d", len(d.Result), len(results[d.ID]), len(d.Offer))
			}
		}
	}
	checkAcrossRestart(t, s, dir, check)
}
