package store

import (
	"fmt"
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
// baseline, in one run: Raw is a bare badger transaction (one Set and
// Commit, the same sync option and tuning as the store's); Direct is a
// store Transition committed in its own badger transaction, as before group
// commit (badger's own batching only); Group is the same Transition through
// the store's commit queue (commit.go). Serial runs one writer; Parallel
// runs 64 goroutines, as 64 concurrent delegations do:
//
//	go test -run '^$' -bench Commit -benchtime 2s ./store/
func BenchmarkCommit(b *testing.B) {
	for _, sync := range []struct {
		name string
		opts Options
	}{{"durable", Options{}}, {"nosync", Options{NoSync: true}}} {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d/raw", sync.name, conc), func(b *testing.B) { benchRawCommit(b, sync.opts, conc) })
			b.Run(fmt.Sprintf("%s/conc=%d/direct", sync.name, conc), func(b *testing.B) { benchStoreCommit(b, sync.opts, conc, true) })
			b.Run(fmt.Sprintf("%s/conc=%d/group", sync.name, conc), func(b *testing.B) { benchStoreCommit(b, sync.opts, conc, false) })
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

func benchStoreCommit(b *testing.B, opts Options, conc int, direct bool) {
	s, _ := openTest(b, opts)
	s.direct = direct
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
