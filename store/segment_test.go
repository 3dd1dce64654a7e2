package store

import (
	"bytes"
	"errors"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/protocol"
)

func segFiles(t *testing.T, dir string) []string { return filesIn(t, dir, segDirName) }

// blobMeta returns the user meta and the size badger holds for a
// delegation's blob.
func blobMeta(t *testing.T, s *Store, role Role, id protocol.DelegationID, name string) (byte, int64) {
	t.Helper()
	var meta byte
	var size int64
	err := s.view(func(txn *wtxn) error {
		item, err := txn.Get(blobKey(role, id, name))
		if err != nil {
			return err
		}
		meta, size = item.UserMeta(), item.ValueSize()
		return nil
	})
	mustNoErr(t, err)
	return meta, size
}

// TestMidSizeValuesInSegments: offers and results from segBlobMin up to
// fileBlobMin go to a segment, and only a reference into badger's tree;
// smaller ones stay inline, larger ones go to files. Inline, 64 KiB
// values filled a memtable every 128 of them, and each flush and
// compaction wrote them again.
func TestMidSizeValuesInSegments(t *testing.T) {
	s, dir := openTest(t, Options{})
	value := pattern(64<<10, 1)
	_, last := offersWithoutTables(t, s, value)
	if got := segFiles(t, dir); len(got) != 1 {
		t.Fatalf("segment files %q, want one", got)
	}

	id := protocol.NewDelegationID()
	offer, result := pattern(segBlobMin, 2), pattern(fileBlobMin-1, 3)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: offer}))
	_, err := s.Transition(RoleProvider, id, protocol.StateCompleted, Event{Type: "result"}, func(d *Delegation) {
		d.Result = result
	})
	mustNoErr(t, err)
	for _, name := range []string{blobOffer, blobResult} {
		if meta, size := blobMeta(t, s, RoleProvider, id, name); meta != metaSegBlob || size > 64 {
			t.Errorf("%s: user meta %#x, %d bytes in badger; want a segment reference", name, meta, size)
		}
	}
	small := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: small, Role: RoleProvider, Offer: pattern(segBlobMin-1, 4)}))
	if meta, size := blobMeta(t, s, RoleProvider, small, blobOffer); meta != 0 || size != segBlobMin-1 {
		t.Errorf("a %d-byte offer: user meta %#x, %d bytes in badger; want it inline", segBlobMin-1, meta, size)
	}
	if got := blobFiles(t, dir); len(got) != 0 {
		t.Fatalf("blob files %q: a value under %d bytes went to a file", got, fileBlobMin)
	}

	s = checkAcrossRestart(t, s, dir, func(s *Store) {
		wantBlobs(t, s, RoleProvider, id, offer, result)
		wantBlobs(t, s, RoleRequester, last, value, nil)
	})
	// A new run writes a segment of its own.
	mustNoErr(t, s.CreateDelegation(Delegation{ID: protocol.NewDelegationID(), Role: RoleRequester, Offer: value}))
	if got := segFiles(t, dir); len(got) != 2 {
		t.Fatalf("after a restart and a write, segment files %q, want two", got)
	}

	mem, err := OpenInMemory(Options{})
	mustNoErr(t, err)
	defer mem.Close()
	mustNoErr(t, mem.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Offer: value}))
	if meta, size := blobMeta(t, mem, RoleRequester, id, blobOffer); meta != 0 || size != int64(len(value)) {
		t.Errorf("in memory: user meta %#x, %d bytes in badger; want the value inline", meta, size)
	}
}

// TestSegmentReplay: a crash that loses every unsynced write, segments
// included (here: badger's files and the segment directory are put back
// as they were at the last checkpoint), keeps every value a commit
// acknowledged: replay writes the logged values back into their
// segments, recreating a lost one, and the next checkpoint syncs them.
// The same holds when the store is reopened without sync, which replays
// the log once and drops it.
// A checkpoint that syncs the segments while a value is being appended
// leaves the segment marked, so that the next checkpoint syncs the value
// before the log that holds it starts over.
func TestSegmentMarkedOnceWritten(t *testing.T) {
	sg, err := openSegments(t.TempDir(), true)
	mustNoErr(t, err)
	t.Cleanup(func() { _ = sg.close() })
	segWriting = func() { mustNoErr(t, sg.syncDirty(false)) }
	t.Cleanup(func() { segWriting = nil })
	ref, err := sg.append(pattern(8<<10, 1))
	mustNoErr(t, err)
	sg.mu.Lock()
	marked := sg.dirty[ref.name]
	sg.mu.Unlock()
	if !marked {
		t.Fatal("a value written after a checkpoint's sync left its segment unmarked: the next checkpoint would not sync it")
	}
}

func TestSegmentReplay(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		name := "sync"
		if noSync {
			name = "nosync"
		}
		t.Run(name, func(t *testing.T) {
			s, dir := openTest(t, Options{})
			mustNoErr(t, s.Close())
			type want struct {
				id            protocol.DelegationID
				offer, result []byte
			}
			var wants []want
			lost, _ := crash(t, dir, func(s *Store) {
				for i, size := range []int{segBlobMin, 16 << 10, 64 << 10, fileBlobMin - 1} {
					w := want{protocol.NewDelegationID(), pattern(size, byte(i)), pattern(size, byte(i+7))}
					mustNoErr(t, s.CreateDelegation(Delegation{ID: w.id, Role: RoleRequester, Offer: w.offer}))
					_, err := s.Transition(RoleRequester, w.id, protocol.StateCompleted, Event{Type: "result"}, func(d *Delegation) {
						d.Result = w.result
					})
					mustNoErr(t, err)
					wants = append(wants, w)
				}
			})
			if got := segFiles(t, lost); len(got) != 0 {
				t.Fatalf("the crashed directory holds segments %q already: the test shows nothing", got)
			}
			r := openAt(t, lost, Options{NoSync: noSync})
			check := func(r *Store) {
				t.Helper()
				for _, w := range wants {
					wantBlobs(t, r, RoleRequester, w.id, w.offer, w.result)
				}
			}
			check(r)
			if got := segFiles(t, lost); len(got) != 1 {
				t.Fatalf("after replay, segment files %q, want the one restored", got)
			}
			check(reopen(t, r, lost, Options{NoSync: noSync}))
		})
	}
}

// TestSegmentDamage: a value whose segment is missing, short or altered
// reads as ErrCorrupt, never as a wrong value, and the store still opens.
func TestSegmentDamage(t *testing.T) {
	for _, c := range damages(20 << 10) {
		t.Run(c.name, func(t *testing.T) {
			s, dir := openTest(t, Options{})
			id := protocol.NewDelegationID()
			mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: pattern(40<<10, 5)}))
			s = reopen(t, s, dir, Options{}) // the log checkpointed: nothing replays the segment
			mustNoErr(t, s.Close())
			damageTheOne(t, dir, segDirName, c)
			wantValuesCorrupt(t, openAt(t, dir, Options{}), id)
		})
	}
}

// TestSchema7FilesStillRead: a schema 7 store kept values from 128 KiB in
// files; from schema 8 such values go to segments, and the files still
// read.
func TestSchema7FilesStillRead(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester}))
	value := pattern(fileRefMin+5, 8)
	key := blobKey(RoleRequester, id, blobOffer)
	mustNoErr(t, s.update([]string{string(delegationKey(RoleRequester, id))}, func(txn *wtxn) error {
		ref, err := s.files.write(key, value)
		if err != nil {
			return err
		}
		return txn.SetEntry(badger.NewEntry(key, ref.encode()).WithMeta(metaFileBlob))
	}))
	wantBlobs(t, s, RoleRequester, id, value, nil)
}

func TestSegRefRoundTrip(t *testing.T) {
	r := segRef{name: "seg-0123456789abcdef", off: 1 << 20, size: 64 << 10, crc: 0xdeadbeef}
	b := append(r.encode(), "tail"...)
	got, n, err := decodeSegRef(b)
	mustNoErr(t, err)
	if got != r || string(b[n:]) != "tail" {
		t.Fatalf("decoded %+v with %q after it, want %+v and the tail", got, b[n:], r)
	}
	for _, bad := range []segRef{
		{name: "seg-0123456789abcdef", size: segBlobMin - 1},
		{name: "seg-0123456789abcdef", size: fileBlobMin},
		{name: "seg-0123456789abcdef", size: 64 << 10, off: segMax},
		{name: "../../etc/passwd", size: 64 << 10},
		{name: "seg-0123456789ABCDEF", size: 64 << 10},
	} {
		if _, _, err := decodeSegRef(bad.encode()); err == nil {
			t.Errorf("%+v decoded without error", bad)
		}
	}
	// An offset of 0 written in two bytes where one will do: a reference
	// has one encoding only, so this one is corrupt.
	ok := segRef{name: "seg-0123456789abcdef", size: 6 << 10}.encode()
	long := append([]byte{ok[0], 0x80, 0x00}, ok[2:]...)
	if _, _, err := decodeSegRef(long); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an offset in two bytes decoded: %v", err)
	}
	if _, _, err := decodeSegRef(ok); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeSegRef(f *testing.F) {
	f.Add(segRef{name: "seg-0123456789abcdef", off: 4096, size: 8192, crc: 7}.encode())
	f.Add([]byte{segRefV1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeSegRef(b)
		if err != nil {
			return
		}
		if n > len(b) || !bytes.Equal(r.encode(), b[:n]) {
			t.Fatalf("%x decoded to %+v (%d bytes), which encodes otherwise", b, r, n)
		}
	})
}
