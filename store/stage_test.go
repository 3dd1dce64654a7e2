package store

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/protocol"
)

func withMetrics() (Options, *Metrics) {
	m := NewMetrics(prometheus.NewRegistry())
	return Options{Metrics: m}, m
}

// TestStagedFileTaken: a value staged before its write is stored from the
// staged file: one file per value, none written in the commit, the same
// bytes back after a restart. A delegation created with large values stages
// them itself, side by side; a result set in a transition after StageResult
// takes its staged file too.
func TestStagedFileTaken(t *testing.T) {
	opts, m := withMetrics()
	s, dir := openTest(t, opts)
	id := protocol.NewDelegationID()
	offer, result := pattern(1<<20, 1), pattern(300<<10, 2)

	s.StageOffer(RoleProvider, id, offer)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: offer}))
	if got := blobFiles(t, dir); len(got) != 1 {
		t.Fatalf("after the staged offer's create, blob files %q, want one", got)
	}
	if got, want := m.ValueFiles(), map[string]uint64{"staged": 1}; !maps.Equal(got, want) {
		t.Fatalf("value files %v, want %v", got, want)
	}

	s.StageResult(RoleProvider, id, slices.Clone(result)) // the same bytes, another slice
	_, err := s.Transition(RoleProvider, id, protocol.StateCompleted, Event{Type: "result"}, func(d *Delegation) {
		d.Result = result
	})
	mustNoErr(t, err)
	if got := blobFiles(t, dir); len(got) != 2 {
		t.Fatalf("after the staged result, blob files %q, want two", got)
	}

	id2 := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id2, Role: RoleRequester, Offer: offer, Result: result}))
	if got, want := m.ValueFiles(), map[string]uint64{"staged": 4}; !maps.Equal(got, want) {
		t.Fatalf("value files %v, want %v", got, want)
	}

	s = reopen(t, s, dir, Options{})
	for _, k := range []struct {
		role Role
		id   protocol.DelegationID
	}{{RoleProvider, id}, {RoleRequester, id2}} {
		d, err := s.GetDelegation(k.role, k.id)
		mustNoErr(t, err)
		if !bytes.Equal(d.Offer, offer) || !bytes.Equal(d.Result, result) {
			t.Fatalf("%v: read back %d and %d bytes, not what was staged", k.role, len(d.Offer), len(d.Result))
		}
	}
	if got := blobFiles(t, dir); len(got) != 4 {
		t.Fatalf("after the restart, blob files %q, want the four stored", got)
	}
}

// TestStagedFileNotTaken: a staged file that its delegation does not store
// (other bytes stored, dropped, never stored, the create refused, the
// store closed) is removed and leaves the stored values whole.
func TestStagedFileNotTaken(t *testing.T) {
	opts, m := withMetrics()
	s, dir := openTest(t, opts)
	offer, other := pattern(1<<20, 1), pattern(1<<20, 9)

	id := protocol.NewDelegationID()
	s.StageOffer(RoleProvider, id, offer)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: other}))

	dropped := protocol.NewDelegationID()
	s.StageOffer(RoleProvider, dropped, offer)
	s.StageResult(RoleProvider, dropped, offer)
	s.DropStaged(RoleProvider, dropped)

	refused := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: refused, Role: RoleRequester}))
	err := s.CreateDelegation(Delegation{ID: refused, Role: RoleRequester, Offer: offer})
	wantErr(t, err, ErrExists)

	left := protocol.NewDelegationID()
	s.StageResult(RoleRequester, left, offer)
	s.StageOffer(RoleRequester, protocol.NewDelegationID(), pattern(100, 1)) // inline: nothing staged

	mustNoErr(t, s.Close())                                       // waits for the removals
	s.StageOffer(RoleProvider, protocol.NewDelegationID(), offer) // closed: nothing
	if got := blobFiles(t, dir); len(got) != 1 {
		t.Fatalf("blob files %q, want only the stored offer's", got)
	}
	// Staged: the unused offer, two dropped, the refused create's, the
	// one left at close, and the stored one.
	if got, want := m.ValueFiles(), map[string]uint64{"staged": 6, "dropped": 5}; !maps.Equal(got, want) {
		t.Fatalf("value files %v, want %v", got, want)
	}
	s = openAt(t, dir, Options{})
	d, err := s.GetDelegation(RoleProvider, id)
	mustNoErr(t, err)
	if !bytes.Equal(d.Offer, other) {
		t.Fatal("the stored offer is not the bytes stored, but the staged ones")
	}
	if _, err := s.GetDelegation(RoleProvider, dropped); err == nil {
		t.Fatal("a dropped stage stored a delegation")
	}
}

// TestStagedConcurrent: stages, drops, creates and transitions of many
// delegations at once, on a store without sync (run with -race): every
// delegation reads back what it stored, and no file is left but theirs.
func TestStagedConcurrent(t *testing.T) {
	s, dir := openTest(t, Options{NoSync: true})
	const n = 16
	var wg sync.WaitGroup
	ids := make([]protocol.DelegationID, n)
	for i := range n {
		ids[i] = protocol.NewDelegationID()
		wg.Go(func() {
			offer, result := pattern(300<<10, byte(i)), pattern(300<<10, byte(i+100))
			s.StageOffer(RoleProvider, ids[i], offer)
			if i%4 == 0 {
				s.DropStaged(RoleProvider, ids[i])
			}
			if err := s.CreateDelegation(Delegation{ID: ids[i], Role: RoleProvider, Offer: offer}); err != nil {
				t.Error(err)
				return
			}
			s.StageResult(RoleProvider, ids[i], result)
			_, err := s.Transition(RoleProvider, ids[i], protocol.StateCompleted, Event{Type: "result"}, func(d *Delegation) {
				d.Result = result
			})
			if err != nil {
				t.Error(err)
			}
			s.DropStaged(RoleProvider, ids[i])
		})
	}
	wg.Wait()
	s = reopen(t, s, dir, Options{NoSync: true})
	for i, id := range ids {
		d, err := s.GetDelegation(RoleProvider, id)
		mustNoErr(t, err)
		if !bytes.Equal(d.Offer, pattern(300<<10, byte(i))) || !bytes.Equal(d.Result, pattern(300<<10, byte(i+100))) {
			t.Fatalf("delegation %d read back wrong", i)
		}
	}
	if got := blobFiles(t, dir); len(got) != 2*n {
		t.Fatalf("%d blob files, want %d", len(got), 2*n)
	}
}

// TestStagedDropDuringClose: DropStaged racing Close (an engine's task
// ending as its node shuts down) removes every staged file, and neither
// waits forever nor misuses Close's wait (run with -race).
func TestStagedDropDuringClose(t *testing.T) {
	for range 20 {
		s, dir := openTest(t, Options{NoSync: true})
		ids := make([]protocol.DelegationID, 8)
		for i := range ids {
			ids[i] = protocol.NewDelegationID()
			s.StageOffer(RoleProvider, ids[i], pattern(300<<10, byte(i)))
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Go(func() { s.DropStaged(RoleProvider, id) })
		}
		mustNoErr(t, s.Close())
		wg.Wait()
		if got := blobFiles(t, dir); len(got) != 0 {
			t.Fatalf("after drops and close, blob files %q, want none", got)
		}
	}
}

// TestStagedAhead: a result staged ahead, its bytes final only below
// ready until complete(true), is stored with the bytes it holds then, from
// the one file, also after a restart: from aligned memory and not, with
// whole blocks before ready or none. complete(false), or Close before
// complete, leaves no file and stores nothing; complete after Close
// neither blocks nor fails.
func TestStagedAhead(t *testing.T) {
	opts, m := withMetrics()
	s, dir := openTest(t, opts)
	type stored struct {
		id protocol.DelegationID
		b  []byte
	}
	var all []stored
	for _, n := range []int{1 << 20, 1<<20 + 777, 300 << 10} {
		for _, ready := range []int{n - 500, 100} {
			for _, b := range [][]byte{alignedBuffer(n), make([]byte, n+1)[1:]} {
				copy(b, pattern(n, byte(n)))
				id := protocol.NewDelegationID()
				before := blobFiles(t, dir)
				complete := s.StageResultAhead(RoleProvider, id, b, ready)
				if head := int64(ready &^ (directBlock - 1)); head > 0 && !s.files.buffered.Load() {
					waitAhead(t, dir, before, head)
				}
				copy(b[ready:], pattern(n-ready, 7)) // the rest is written now
				complete(true)
				complete(false) // too late: the first call counts
				mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Result: b}))
				all = append(all, stored{id, bytes.Clone(b)})
			}
		}
	}
	if got, want := m.ValueFiles(), map[string]uint64{"staged": uint64(len(all))}; !maps.Equal(got, want) {
		t.Fatalf("value files %v, want %v: each result written once, ahead", got, want)
	}

	dropped := protocol.NewDelegationID()
	complete := s.StageResultAhead(RoleProvider, dropped, pattern(1<<20, 1), 1<<19)
	complete(false)
	left := protocol.NewDelegationID()
	late := s.StageResultAhead(RoleProvider, left, pattern(1<<20, 2), 1<<19)
	mustNoErr(t, s.Close()) // does not wait for late
	late(true)
	if got := blobFiles(t, dir); len(got) != len(all) {
		t.Fatalf("%d blob files, want the %d stored", len(got), len(all))
	}

	s = openAt(t, dir, Options{})
	for i, x := range all {
		d, err := s.GetDelegation(RoleProvider, x.id)
		mustNoErr(t, err)
		if !bytes.Equal(d.Result, x.b) {
			t.Fatalf("result %d: read back %d bytes, not the final ones", i, len(d.Result))
		}
	}
	for _, id := range []protocol.DelegationID{dropped, left} {
		if _, err := s.GetDelegation(RoleProvider, id); err == nil {
			t.Fatal("a result staged ahead and never stored stored a delegation")
		}
	}
}

// waitAhead waits for a blob file not among before to hold head bytes: a
// value staged ahead is written before it is final.
func waitAhead(t *testing.T, dir string, before []string, head int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, name := range blobFiles(t, dir) {
			if slices.Contains(before, name) {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, blobDirName, name)); err == nil && fi.Size() >= head {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no file holds the %d bytes final before complete", head)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStagedSyncsItsDirectory: a staged file's name is synced while its
// data is written, by a directory sync that starts once the file exists,
// and the write that takes the staged file waits for that sync.
func TestStagedSyncsItsDirectory(t *testing.T) {
	s, dir := openTest(t, Options{})
	blobs := filepath.Join(dir, blobDirName)
	entered, release := make(chan bool, 4), make(chan struct{})
	syncingDir = func(d string) error {
		if d == blobs {
			names, _ := os.ReadDir(blobs)
			entered <- len(names) > 0
			<-release
		}
		return nil
	}
	t.Cleanup(func() { syncingDir = nil })

	id := protocol.NewDelegationID()
	offer := pattern(1<<20, 3)
	s.StageOffer(RoleProvider, id, offer)
	created := make(chan error, 1)
	go func() { created <- s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: offer}) }()
	select {
	case exists := <-entered:
		if !exists {
			t.Fatal("the directory sync started before the staged file existed")
		}
	case err := <-created:
		t.Fatalf("the create returned (%v) without syncing its staged file's directory", err)
	}
	select {
	case err := <-created:
		t.Fatalf("the create returned (%v) while its staged file's directory sync had not ended", err)
	default:
	}
	close(release)
	mustNoErr(t, <-created)
	got, err := s.GetDelegation(RoleProvider, id)
	mustNoErr(t, err)
	if !bytes.Equal(got.Offer, offer) {
		t.Fatal("the staged offer did not read back the same")
	}
}

// TestStagedDirectorySyncFails: a staged file whose directory sync failed
// is not taken: the write that stores the value writes its file again, in
// the commit, and the value reads back whole.
func TestStagedDirectorySyncFails(t *testing.T) {
	opts, m := withMetrics()
	s, dir := openTest(t, opts)
	blobs := filepath.Join(dir, blobDirName)
	var mu sync.Mutex
	failed := false
	syncingDir = func(d string) error {
		mu.Lock()
		defer mu.Unlock()
		if d == blobs && !failed {
			failed = true
			return errors.New("injected")
		}
		return nil
	}
	t.Cleanup(func() { syncingDir = nil })

	id := protocol.NewDelegationID()
	offer := pattern(1<<20, 4)
	s.StageOffer(RoleProvider, id, offer)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: offer}))
	if !failed {
		t.Fatal("the staged write did not sync its directory")
	}
	if got, want := m.ValueFiles(), map[string]uint64{"staged": 1, "dropped": 1, "commit": 1}; !maps.Equal(got, want) {
		t.Fatalf("value files %v, want %v: the staged file was taken though its name was not synced, or kept", got, want)
	}
	s = reopen(t, s, dir, Options{})
	got, err := s.GetDelegation(RoleProvider, id)
	mustNoErr(t, err)
	if !bytes.Equal(got.Offer, offer) {
		t.Fatal("the offer did not read back the same")
	}
}
