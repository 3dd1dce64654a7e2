package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/protocol"
)

// The Transition benchmarks measure one durable state change per op. Compare
// Durable with NoSync (the cost of syncing at all) and Durable with
// DurableSerial (how much of the sync concurrent writers share through
// badger's group commit). Each goroutine works on its own delegation, as
// independent tasks on a node do; SetParallelism gives more concurrent
// committers than the 2 cores of CI machines. Compare ratios from one run:
//
//	go test -run '^$' -bench Transition -benchtime 2s ./store/
func BenchmarkTransitionDurable(b *testing.B) { benchTransition(b, Options{}, 16) }

func BenchmarkTransitionNoSync(b *testing.B) { benchTransition(b, Options{NoSync: true}, 16) }

func BenchmarkTransitionDurableSerial(b *testing.B) { benchTransition(b, Options{}, 0) }

func benchTransition(b *testing.B, opts Options, parallelism int) {
	s, _ := openTest(b, opts)
	newRunning := func() (protocol.DelegationID, error) {
		id := protocol.NewDelegationID()
		return id, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, State: protocol.StateRunning})
	}
	// Alternate between two live states so that no delegation ever ends.
	step := func(id protocol.DelegationID, i int) error {
		to := protocol.StateRunning
		if i%2 == 0 {
			to = protocol.StateInputRequired
		}
		_, err := s.Transition(RoleProvider, id, to, Event{Data: []byte("partial output")}, nil)
		return err
	}
	b.ReportAllocs()
	if parallelism == 0 {
		id, err := newRunning()
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			if err := step(id, i); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// b.Fatal may not be called from these goroutines: report and stop.
		id, err := newRunning()
		if err != nil {
			b.Error(err)
			return
		}
		for i := 0; pb.Next(); i++ {
			if err := step(id, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCommit measures the store's commit path beside its raw
// baselines, in one run: Raw is a bare badger transaction (one Set and
// Commit, with SyncWrites when durable, the same tuning as the store's):
// what a commit cost when badger synced it; Block (durable only) is one
// synced write of a 4 KiB block to a file whose blocks are all written,
// the way the commit log writes (O_DIRECT|O_DSYNC on Linux): the disk's
// floor for one durable commit; Group is a store Transition through the
// commit queue and the commit log (commit.go, commitlog.go). Serial runs
// one writer; Parallel runs 64 goroutines, as 64 concurrent delegations do:
//
//	go test -run '^$' -bench Commit -benchtime 2s ./store/
func BenchmarkCommit(b *testing.B) {
	for _, sync := range []struct {
		name string
		opts Options
	}{{"durable", Options{}}, {"nosync", Options{NoSync: true}}} {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d/raw", sync.name, conc), func(b *testing.B) { benchRawCommit(b, sync.opts, conc) })
			if !sync.opts.NoSync {
				b.Run(fmt.Sprintf("%s/conc=%d/block", sync.name, conc), func(b *testing.B) { benchBlockWrite(b, conc) })
			}
			b.Run(fmt.Sprintf("%s/conc=%d/group", sync.name, conc), func(b *testing.B) { benchStoreCommit(b, sync.opts, conc) })
		}
	}
}

// parallel runs op on conc goroutines until b.N ops are done in all.
func parallel(b *testing.B, conc int, setup func() (func(i int) error, error)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op, err := setup()
			if err != nil {
				b.Error(err)
				return
			}
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func benchRawCommit(b *testing.B, opts Options, conc int) {
	dir := b.TempDir()
	bo := badgerOptions(dir, opts)
	bo.SyncWrites = !opts.NoSync
	db, err := badger.Open(bo)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	parallel(b, conc, func() (func(int) error, error) {
		key := []byte("raw/" + protocol.NewDelegationID().String())
		val := make([]byte, 200) // about a delegation record and an event
		return func(int) error {
			return db.Update(func(txn *badger.Txn) error { return txn.Set(key, val) })
		}, nil
	})
}

// openWritten returns a file of size bytes, written and synced, open for
// direct writes that are synced before they return (see syncedWrite).
func openWritten(b *testing.B, size int) *os.File {
	path := filepath.Join(b.TempDir(), "written")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|oDirect|oDSync, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return f
}

// syncedWrite writes buf at off in a file from openWritten, durable when
// it returns.
func syncedWrite(f *os.File, buf []byte, off int64) error {
	if _, err := f.WriteAt(buf, off); err != nil {
		return err
	}
	if oDSync == 0 {
		return f.Sync()
	}
	return nil
}

// benchBlockWrite writes 4 KiB blocks, one writer at a time, in turn over a
// file written in full beforehand, each write synced before it returns.
func benchBlockWrite(b *testing.B, conc int) {
	const blocks = 1024
	f := openWritten(b, blocks*logBlock)
	var mu sync.Mutex
	var n int64
	buf := alignedBuffer(logBlock)
	b.ReportAllocs()
	parallel(b, conc, func() (func(int) error, error) {
		return func(int) error {
			mu.Lock()
			defer mu.Unlock()
			buf[0]++
			err := syncedWrite(f, buf, (n%blocks)*logBlock)
			n++
			return err
		}, nil
	})
}

func benchStoreCommit(b *testing.B, opts Options, conc int) {
	s, _ := openTest(b, opts)
	b.ReportAllocs()
	parallel(b, conc, func() (func(int) error, error) {
		id := protocol.NewDelegationID()
		if err := s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, State: protocol.StateRunning}); err != nil {
			return nil, err
		}
		return func(i int) error {
			to := protocol.StateRunning
			if i%2 == 0 {
				to = protocol.StateInputRequired
			}
			_, err := s.Transition(RoleProvider, id, to, Event{Data: []byte("partial output")}, nil)
			return err
		}, nil
	})
}

// BenchmarkMidSizeOffer stores a new delegation with a 64 KiB offer per
// op, one at a time, on a durable store: with the offer in a segment (as
// the store keeps it, segment.go), inline in badger's tree (as before
// schema 8), and beside them the raw cost of making 64 KiB durable, a
// synced direct write of it to a file written before. Inline, the cost
// per op grows with b.N, as badger's compactions rewrite the values
// again and again:
//
//	go test -run '^$' -bench MidSizeOffer -benchtime 3000x ./store/
func BenchmarkMidSizeOffer(b *testing.B) {
	const size = 64 << 10
	for _, where := range []string{"segment", "inline"} {
		b.Run(where, func(b *testing.B) {
			s, _ := openTest(b, Options{})
			if where == "inline" {
				s.segs = nil // putDelegation keeps the value inline
			}
			offer := pattern(size, 1)
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.CreateDelegation(Delegation{ID: protocol.NewDelegationID(), Role: RoleProvider, Offer: offer}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("raw", func(b *testing.B) {
		const slots = 64
		f := openWritten(b, slots*size)
		buf := alignedBuffer(size)
		copy(buf, pattern(size, 1))
		b.SetBytes(size)
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			if err := syncedWrite(f, buf, (n%slots)*size); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
}
