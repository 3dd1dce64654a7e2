package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Latency summarises a set of timings.
type Latency struct {
	Samples int           `json:"samples"`
	Mean    time.Duration `json:"mean_ns"`
	P50     time.Duration `json:"p50_ns"`
	P90     time.Duration `json:"p90_ns"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
}

// summarise sorts ds in place and returns its nearest-rank percentiles.
func summarise(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(ds))+0.999999999) - 1 // ceil(p·n) - 1
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return Latency{
		Samples: len(ds), Mean: sum / time.Duration(len(ds)),
		P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Max: ds[len(ds)-1],
	}
}

// loadResult is what one closed-loop phase measured.
type loadResult struct {
	ops        int
	errors     int
	firstError string
	window     time.Duration
	latency    Latency
	// cpu is the CPU time the whole process used during the window, and
	// machineCPU the time every process did; zero where unknown.
	cpu, machineCPU time.Duration
	// counted is how much the counter given to runLoad grew during the
	// window.
	counted int64
}

// opTimeout bounds one operation, so that a lost one fails the operation
// instead of hanging the phase.
const opTimeout = 2 * ioTimeout

// runLoad runs op from conc workers, one call after another, for warmup
// and then for window. Calls that complete inside the window count; those
// that complete in the warm-up or after the window do not. Each worker gets
// its own index, for buffers it may reuse. counter, if not nil, is read
// at the window's start and end.
func runLoad(ctx context.Context, conc int, warmup, window time.Duration, counter *atomic.Int64, op func(ctx context.Context, worker int) error) loadResult {
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+window)
	type tally struct {
		lat    []time.Duration
		errors int
		first  string
	}
	tallies := make([]tally, conc)
	var wg sync.WaitGroup
	if counter == nil {
		counter = new(atomic.Int64)
	}
	sampled := make(chan loadResult, 1)
	go func() {
		var out loadResult
		ok := sleepUntil(ctx, from)
		c0, ok0 := cpuTime()
		m0, okm0 := systemCPU()
		n0 := counter.Load()
		ok = ok && sleepUntil(ctx, until)
		c1, ok1 := cpuTime()
		m1, okm1 := systemCPU()
		out.counted = counter.Load() - n0
		if ok && ok0 && ok1 {
			out.cpu = c1 - c0
		}
		if ok && okm0 && okm1 {
			out.machineCPU = time.Duration((m1 - m0) * float64(time.Second))
		}
		sampled <- out
	}()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := &tallies[w]
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				octx, cancel := context.WithTimeout(ctx, opTimeout)
				err := op(octx, w)
				cancel()
				t1 := time.Now()
				if t1.Before(from) || t1.After(until) {
					continue
				}
				if err != nil {
					if t.errors == 0 {
						t.first = err.Error()
					}
					t.errors++
					continue
				}
				t.lat = append(t.lat, t1.Sub(t0))
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	res := <-sampled
	res.window = window
	for _, t := range tallies {
		all = append(all, t.lat...)
		res.errors += t.errors
		if res.firstError == "" {
			res.firstError = t.first
		}
	}
	res.ops = len(all)
	res.latency = summarise(all)
	return res
}

// sleepUntil waits for t, or reports false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
