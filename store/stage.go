package store

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"github.com/kithmesh/kith/protocol"
)

// Staged files. A large offer or result (fileBlobMin bytes or more, on a
// disk store) costs its file's write and sync: about a millisecond per MiB
// on the machines kith was measured on, more where the page cache is slow
// to take in fresh pages. Inside a commit that write holds up the commits
// batched with it, and it starts only once everything before the commit is
// done. A caller that knows a value it will store before it stores it
// stages it (StageOffer, StageResult): its file is written, synced and its
// directory synced at once, on a goroutine of its own, while the caller
// goes on (the provider runs the task and signs its result; the requester
// checks the result's proof). The write that then stores the same bytes for
// the same delegation waits for the file before it enters the commit
// queue, and commits a reference to it instead of writing the bytes again.
// CreateDelegation stages the large values it is given itself, so that an
// offer and a result it stores together are written side by side, outside
// the commit queue.
//
// A staged file is like any other before its commit: a crash leaves it
// unreferenced and the next Open removes it. A staged file no write takes
// (the delegation was never stored, or stored other bytes) is removed by
// DropStaged, by the write that stores other bytes, or at Close.
type staged struct {
	owner string // the delegation key: what update waits on
	b     []byte
	done  chan struct{}
	ref   fileRef // once done, if err is nil
	err   error
	// rest, for a value staged ahead (StageResultAhead), takes the one
	// answer finish gives: b is final (true) or dropped.
	rest chan bool
	once sync.Once
}

// finish tells the write of a value staged ahead that its bytes are all
// final (true) or that it is dropped (false); only the first call counts.
// It does nothing for a value staged whole.
func (x *staged) finish(final bool) {
	if x.rest == nil {
		return
	}
	x.once.Do(func() { x.rest <- final })
}

// final waits for finish's answer.
func (x *staged) final() bool { return <-x.rest }

// stageSet is a disk store's staged files, by blob key.
type stageSet struct {
	mu     sync.Mutex
	m      map[string]*staged
	closed bool // closeStaged has run: nothing more is staged or waited for
	// wg counts the writes and removals under way; Add only with mu held
	// and closed unset, so that closeStaged's Wait sees every one.
	wg sync.WaitGroup
}

// StageOffer starts writing the offer that the delegation (role, id) will be
// stored with to its file: see staged. It does nothing on a store without
// files or for a value kept in badger.
func (s *Store) StageOffer(role Role, id protocol.DelegationID, b []byte) {
	s.stage(blobKey(role, id, blobOffer), string(delegationKey(role, id)), b)
}

// StageResult is StageOffer for the delegation's result.
func (s *Store) StageResult(role Role, id protocol.DelegationID, b []byte) {
	s.stage(blobKey(role, id, blobResult), string(delegationKey(role, id)), b)
}

// StageResultAhead is StageResult for a result whose bytes are final only
// below ready (protocol.ResultAhead) until the caller calls complete: with
// true once all of b is final, with false to drop it. Where the file is
// written past the page cache, its whole blocks below ready are written
// at once, while the caller computes the rest. The caller must call
// complete before it stores the result, and on every path: the write
// waits for it, and so do the store's writes for the delegation and its
// Close. Only the first call counts; where nothing is staged, complete
// does nothing.
func (s *Store) StageResultAhead(role Role, id protocol.DelegationID, b []byte, ready int) (complete func(final bool)) {
	x := s.stageAhead(blobKey(role, id, blobResult), string(delegationKey(role, id)), b, ready)
	if x == nil {
		return func(bool) {}
	}
	return x.finish
}

// DropStaged removes the files staged for the delegation (role, id) that no
// write took. Nothing staged, or all taken: it does nothing.
func (s *Store) DropStaged(role Role, id protocol.DelegationID) {
	if s.files == nil {
		return
	}
	owner := string(delegationKey(role, id))
	var drop []*staged
	st := &s.files.staged
	st.mu.Lock()
	for k, x := range st.m {
		if x.owner == owner {
			drop = append(drop, x)
			delete(st.m, k)
		}
	}
	st.mu.Unlock()
	for _, x := range drop {
		s.discard(x)
	}
}

// stage starts writing b to key's file, unless b (the same slice) is
// staged there already; other bytes staged there are dropped.
func (s *Store) stage(key []byte, owner string, b []byte) {
	s.stageAhead(key, owner, b, len(b))
}

// stageAhead is stage for a b final only below ready until the returned
// entry's finish says (StageResultAhead); ready at len(b) or beyond, b is
// final now. It returns nil when it stages nothing.
func (s *Store) stageAhead(key []byte, owner string, b []byte, ready int) *staged {
	fb := s.files
	if fb == nil || len(b) < fileBlobMin || len(b) > s.maxValue {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil
	}
	x := &staged{owner: owner, b: b, done: make(chan struct{})}
	var final func() bool
	if ready < len(b) {
		x.rest = make(chan bool, 1)
		final = x.final
	}
	st := &fb.staged
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	if st.m == nil {
		st.m = map[string]*staged{}
	}
	old := st.m[string(key)]
	if old != nil && sameSlice(old.b, b) {
		st.mu.Unlock()
		return old
	}
	st.m[string(key)] = x
	st.wg.Add(1)
	st.mu.Unlock()
	if old != nil {
		s.discard(old) // other bytes: the later ones are the ones to store
	}
	s.metrics.fileWritten("staged")
	go func() {
		defer st.wg.Done()
		defer close(x.done)
		// The file's name is synced while its data is written: the
		// directory's sync starts as soon as the file exists, and the two
		// waits on the disk overlap. A file made again (direct I/O
		// refused) starts another; the last one covers the file kept.
		var dirs []chan error
		created := func() {
			if fb.sync {
				c := make(chan error, 1)
				go func() { c <- syncDirectory(fb.dir) }()
				dirs = append(dirs, c)
			}
		}
		x.ref, x.err = fb.writeAhead(key, b, ready, final, created)
		for i, c := range dirs {
			if err := <-c; i == len(dirs)-1 && x.err == nil {
				x.err = err
			}
		}
	}()
	// The write goes first: what the caller does next is CPU work (hashes,
	// encryption), and on a busy machine the new goroutine otherwise waited
	// behind it for a core, up to a millisecond per MiB of that work, while
	// the disk stood idle. Yielding once runs it now; it leaves the core as
	// soon as its write waits on the disk (and its P too, where the write
	// goes through AIO: aio_linux.go).
	runtime.Gosched()
	return x
}

// awaitStaged waits for the writes staged for the delegations whose keys
// are among keys (an update's lock keys) to end: before the update enters
// the commit queue, so that the batch never waits on one.
func (fb *fileBlobs) awaitStaged(keys []string) {
	if fb == nil {
		return
	}
	var wait []chan struct{}
	st := &fb.staged
	st.mu.Lock()
	for _, x := range st.m {
		for _, k := range keys {
			if x.owner == k {
				wait = append(wait, x.done)
			}
		}
	}
	st.mu.Unlock()
	for _, ch := range wait {
		<-ch
	}
}

// takeStaged returns the reference to the file staged for key, if one was
// written without error and holds b; the entry is gone either way, and a
// file that does not hold b is removed. The caller has waited for the
// write (awaitStaged); one still running is left to DropStaged or Close.
func (s *Store) takeStaged(key, b []byte) (fileRef, bool) {
	st := &s.files.staged
	st.mu.Lock()
	x := st.m[string(key)]
	if x == nil {
		st.mu.Unlock()
		return fileRef{}, false
	}
	select {
	case <-x.done:
	default:
		st.mu.Unlock()
		return fileRef{}, false
	}
	delete(st.m, string(key))
	st.mu.Unlock()
	if x.err == nil && sameBytes(x.b, b) {
		return x.ref, true
	}
	s.discard(x)
	return fileRef{}, false
}

// sameBytes reports whether a and b hold the same bytes: at once when they
// are the same slice, as they are when the engine stores what it staged.
func sameBytes(a, b []byte) bool {
	return sameSlice(a, b) || bytes.Equal(a, b)
}

func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// discard removes a staged file that nothing refers to, once its write has
// ended. The file was never named by a commit, so no reader can be
// reading it.
func (s *Store) discard(x *staged) {
	x.finish(false) // a value staged ahead and never finished: its write ends now
	s.metrics.fileWritten("dropped")
	fb := s.files
	remove := func() {
		<-x.done
		if x.err == nil {
			_ = os.Remove(filepath.Join(fb.dir, x.ref.name))
		}
	}
	st := &fb.staged
	st.mu.Lock()
	if st.closed {
		// Close has waited already: remove it here (an entry DropStaged
		// took out just before Close).
		st.mu.Unlock()
		remove()
		return
	}
	st.wg.Add(1)
	st.mu.Unlock()
	go func() {
		defer st.wg.Done()
		remove()
	}()
}

// closeStaged waits for every staged write and removal, and removes the
// files no write took. The store is closed: nothing stages any more.
func (s *Store) closeStaged() {
	if s.files == nil {
		return
	}
	st := &s.files.staged
	st.mu.Lock()
	left := st.m
	st.m = nil
	st.mu.Unlock()
	for _, x := range left {
		s.discard(x)
	}
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.wg.Wait()
}
