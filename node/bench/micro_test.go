package bench

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/kithmesh/kith/delegation/executor"
)

// The micro-benchmarks run single phases of `kith bench` under `go test
// -bench`, for profiling one path at a time (Run's phases share one
// process, so a profile of Run mixes them):
//
//	go test -run '^$' -bench 'Delegation/durable/64' -cpuprofile cpu.out ./node/bench/
//
// Figures from here are for profiles and benchstat comparisons of one
// machine with itself; `kith bench` reports the ratios.
func BenchmarkEcho(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprint(conc), func(b *testing.B) {
			hp, err := newHostPair(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer hp.Close()
			payload := payloadText(64)
			runConcurrent(b, conc, func(buf []byte) error { return hp.echo(context.Background(), payload, buf) })
		})
	}
}

func BenchmarkDelegation(b *testing.B) {
	for _, k := range AllStores {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/%d", k, conc), func(b *testing.B) {
				hp, err := newHostPair(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer hp.Close()
				e, err := startEngines(context.Background(), hp, k, b.TempDir(), 2*conc, 4096, 4096)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				text := string(payloadText(64))
				runConcurrent(b, conc, func([]byte) error {
					_, err := e.delegate(context.Background(), text)
					return err
				})
			})
		}
	}
}

// runConcurrent runs op b.N times from conc goroutines, and reports the
// process's CPU time per op (both hosts, both engines) beside the wall time.
func runConcurrent(b *testing.B, conc int, op func(buf []byte) error) {
	b.ReportAllocs()
	c0, ok := cpuTime()
	defer func() {
		if c1, ok1 := cpuTime(); ok && ok1 && b.N > 0 {
			b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
		}
	}()
	if conc == 1 {
		buf := make([]byte, maxPayload)
		for b.Loop() {
			if err := op(buf); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, maxPayload)
		for pb.Next() {
			if err := op(buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkLargeDelegation runs one large delegation at a time (task and
// result each 16 KiB, 64 KiB, 128 KiB, 1 MiB, then 16 MiB) on the durable
// store, for profiling the large path. Values under 256 KiB go to the
// store's segments, larger ones to its value files.
func BenchmarkLargeDelegation(b *testing.B) {
	for _, size := range []int{16 << 10, 64 << 10, 128 << 10, 1 << 20, 16 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		if size < 1<<20 {
			name = fmt.Sprintf("%dKiB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			hp, err := newHostPair(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer hp.Close()
			text := string(payloadText(size))
			budget := max(executor.EstimateTokens(text), 4096)
			e, err := startEngines(context.Background(), hp, StoreDurable, b.TempDir(), 2, budget, budget)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			e.activate(hp)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			c0, ok := cpuTime()
			for b.Loop() {
				if _, err := e.delegateBudget(context.Background(), text, budget); err != nil {
					b.Fatal(err)
				}
			}
			if c1, ok1 := cpuTime(); ok && ok1 {
				b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
