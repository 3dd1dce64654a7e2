package store

import (
	"testing"

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
