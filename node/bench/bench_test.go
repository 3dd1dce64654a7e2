package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kithmesh/kith/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A very short run must produce a well-formed report: every phase ran
// operations without errors, percentiles are ordered, ratios and goals are
// filled in. It asserts no timing (TESTING.md, Benchmarks).
func TestRunReportIsWellFormed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var out bytes.Buffer
	// Each phase counts the operations that end inside its window, so a
	// window must outlast a stall of the machine: under the CI's parallel
	// packages one durable phase once completed nothing in 500 ms (its
	// operations all ended after it, without an error), where a bare store
	// commit loop saw the disk hold a commit 200 ms while other writes
	// synced.
	const window = 1500 * time.Millisecond
	r, err := Run(ctx, Options{
		Duration: window, Warmup: 20 * time.Millisecond,
		Concurrency: []int{4, 1}, Payload: 100, Dir: dir, FsyncSamples: 20,
		// A durable store keeps the first in its commit log's record and
		// the second in a file of its own; the second is more than an
		// in-memory store holds: skipped there.
		Large: []int{200 << 10, 600 << 10}, LargeRuns: 1,
	}, &out)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}

	if want := []int{1, 4}; len(r.Concurrency) != 2 || r.Concurrency[0] != want[0] || r.Concurrency[1] != want[1] {
		t.Errorf("concurrency %v, want %v (sorted)", r.Concurrency, want)
	}
	if !strings.Contains(r.Connection, "/tcp/") || !strings.HasPrefix(r.Connection, "/ip4/127.0.0.1/") {
		t.Errorf("hosts connected over %q, want TCP on loopback", r.Connection)
	}
	checkLatency(t, "fsync", r.Fsync)
	if r.Fsync.Samples != 20 {
		t.Errorf("fsync samples %d, want 20", r.Fsync.Samples)
	}

	wantPhases := 2 * (1 + len(AllStores) + 2) // + the two A2A phases
	if len(r.Phases) != wantPhases {
		t.Fatalf("%d phases, want %d: %+v", len(r.Phases), wantPhases, r.Phases)
	}
	for _, p := range r.Phases {
		name := string(p.Name) + "/" + string(p.Store)
		if p.Ops <= 0 || p.Errors != 0 {
			t.Errorf("%s at %d: %d ops, %d errors (%s)", name, p.Concurrency, p.Ops, p.Errors, p.FirstError)
		}
		if p.OpsPerSec <= 0 || p.Window != window {
			t.Errorf("%s at %d: %.1f ops/s over %s", name, p.Concurrency, p.OpsPerSec, p.Window)
		}
		if p.RoundTrip.Samples != p.Ops {
			t.Errorf("%s at %d: %d samples for %d ops", name, p.Concurrency, p.RoundTrip.Samples, p.Ops)
		}
		checkLatency(t, name, p.RoundTrip)
		// A delegation on a kept stream opens none of its own; the other
		// phases open none at all.
		if p.StreamsPerOp < 0 || (p.Name != PhaseDelegation && p.StreamsPerOp != 0) {
			t.Errorf("%s at %d: %.2f streams per op", name, p.Concurrency, p.StreamsPerOp)
		}
	}
	// Both sides write the delegation at least once (a short task's
	// create, events and result may share one write); the steps list
	// every create and event.
	if a := r.Anatomy; a.Store != StoreDurable || a.RequesterWrites < 1 || a.ProviderWrites < 1 ||
		len(a.Steps) < a.RequesterWrites+a.ProviderWrites-1 || a.Steps[0].Write != "create" || a.RoundTrip <= 0 {
		t.Errorf("anatomy %+v", a)
	}

	if len(r.Ratios) != 2*len(AllStores) {
		t.Errorf("%d ratios, want %d", len(r.Ratios), 2*len(AllStores))
	}
	for _, x := range r.Ratios {
		if x.P50 <= 0 || x.P99 <= 0 || x.Throughput <= 0 {
			t.Errorf("ratio %+v has a zero", x)
		}
	}
	checkLatency(t, "proof sign", r.Proof.Sign)
	checkLatency(t, "proof verify", r.Proof.Verify)
	if len(r.Large) != 2 {
		t.Fatalf("%d large comparisons, want 2", len(r.Large))
	}
	for _, l := range r.Large {
		checkLatency(t, fmtBytes(l.Payload)+" bare copy", l.BareCopy)
		checkLatency(t, fmtBytes(l.Payload)+" store-and-forward copy", l.ForwardCopy)
		if l.Payload < store.FileValueMin {
			// A durable store makes it durable in its commit log's record.
			checkLatency(t, fmtBytes(l.Payload)+" synced log appends", l.SyncedAppends)
			if l.SyncedWrites.Samples+l.SyncedWritesDirect.Samples > 0 {
				t.Errorf("%s: synced writes to files measured, for a payload a store keeps in its log", fmtBytes(l.Payload))
			}
			if want := l.ForwardCopy.P50 + l.SyncedAppends.P50/4; l.DurableFloor != want {
				t.Errorf("%s: durable floor %v, want %v", fmtBytes(l.Payload), l.DurableFloor, want)
			}
		} else {
			checkLatency(t, fmtBytes(l.Payload)+" synced writes", l.SyncedWrites)
			fastest := l.SyncedWrites.P50
			if l.SyncedWritesDirect.Samples > 0 {
				checkLatency(t, fmtBytes(l.Payload)+" synced writes, direct", l.SyncedWritesDirect)
				fastest = min(fastest, l.SyncedWritesDirect.P50)
			} else {
				t.Logf("%s: no direct synced writes: the file system of %s refused direct I/O", fmtBytes(l.Payload), dir)
			}
			if l.SyncedAppends.Samples > 0 {
				t.Errorf("%s: synced log appends measured, for a payload a store keeps in a file", fmtBytes(l.Payload))
			}
			if want := l.ForwardCopy.P50 + fastest/4; l.DurableFloor != want {
				t.Errorf("%s: durable floor %v, want %v", fmtBytes(l.Payload), l.DurableFloor, want)
			}
		}
		if _, ok := cpuTime(); ok && (l.BareCopyCPU <= 0 || l.ForwardCopyCPU <= 0) {
			t.Errorf("%s: CPU per copy %v bare, %v store and forward", fmtBytes(l.Payload), l.BareCopyCPU, l.ForwardCopyCPU)
		}
		if l.Crypto.Hashes <= 0 || l.Crypto.Envelope <= 0 {
			t.Errorf("%s: the protocol's cryptography not timed: %+v", fmtBytes(l.Payload), l.Crypto)
		}
		if len(l.Delegations) != len(AllStores) {
			t.Fatalf("%s: %d store kinds, want %d", fmtBytes(l.Payload), len(l.Delegations), len(AllStores))
		}
		for _, d := range l.Delegations {
			name := fmtBytes(l.Payload) + " " + string(d.Store)
			if skip := d.Store == StoreMemory && l.Payload > 512<<10; skip != (d.Skipped != "") {
				t.Errorf("%s: skipped %q", name, d.Skipped)
				continue
			}
			if d.Skipped != "" {
				continue
			}
			checkLatency(t, name, d.RoundTrip)
			if d.Errors != 0 || d.RoundTrip.Samples != 1 || d.XBare <= 0 {
				t.Errorf("%s: %+v", name, d)
			}
			if (d.Store == StoreDurable) != (d.XFloor > 0) {
				t.Errorf("%s: ratio to the durable floor %v (durable store only)", name, d.XFloor)
			}
		}
	}

	if e := r.Envelope; e == nil || e.Size != 1<<20 || e.EnvelopeRate <= 0 || e.RawRate <= 0 || e.Ratio != e.EnvelopeRate/e.RawRate {
		t.Errorf("envelope %+v", r.Envelope)
	}

	// overhead, durable latency, throughput, CPU per delegation, A2A, one
	// per large size, the envelope.
	if len(r.Goals) != 8 {
		t.Fatalf("%d goals, want 8: %+v", len(r.Goals), r.Goals)
	}
	// The latency goals are read at concurrency 1 and were measured; the
	// throughput and CPU goals are read at 64, which this run did not
	// measure.
	for i, g := range r.Goals {
		want := []string{GoalOK, GoalMissed}
		if i == 2 || i == 3 {
			want = []string{GoalNotMeasured}
		}
		if !contains(want, g.Status) {
			t.Errorf("goal %q: status %q, want one of %q", g.Name, g.Status, want)
		}
		if !contains(want, GoalNotMeasured) && (g.Value <= 0 || g.Measured == "") {
			t.Errorf("goal %q: value %v, measured %q", g.Name, g.Value, g.Measured)
		}
	}
	// The large goals say what the delegation's CPU allows on these cores.
	for _, g := range r.Goals[5:7] {
		if _, ok := cpuTime(); ok && !strings.Contains(g.Measured, "at this CPU") {
			t.Errorf("goal %q says nothing of CPU: %q", g.Name, g.Measured)
		}
	}

	for _, s := range []string{"bare-echo", "durable", "goals", "fsync", "large payloads", "bare copy", "4 synced writes", "4 synced log appends", "durable floor", "proof hashes + envelope", "result proof (Ed25519)", "result proof sign + verify", "envelope seal+open"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("report does not encode as JSON: %v", err)
	}
	// Everything Run made under dir is gone.
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Run left %d entries in %s", len(left), dir)
	}
}

func checkLatency(t *testing.T, name string, l Latency) {
	t.Helper()
	if l.Samples <= 0 || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max || l.Mean <= 0 || l.Mean > l.Max {
		t.Errorf("%s: malformed latency %+v", name, l)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// TestCPUBound checks the arithmetic of what a large delegation's CPU
// allows: its CPU over the cores, and the least CPU (the bare copy's and
// the protocol's cryptography) over the cores, each against the bare copy.
func TestCPUBound(t *testing.T) {
	ms := time.Millisecond
	l := Large{BareCopy: Latency{P50: 2 * ms}, BareCopyCPU: 3 * ms, Crypto: CryptoWork{Hashes: 2 * ms, Envelope: 1 * ms}}
	d := LargeDelegation{CPUPerOp: 10 * ms}
	got := cpuBound(2, l, d)
	for _, want := range []string{
		"CPU 10.00ms a delegation, 3.3× the bare copy's 3.00ms",
		"the envelope (3.00ms) need 6.00ms",
		"on 2 cores at least 5.00ms = 2.50× the bare copy at this CPU, 3.00ms = 1.50× at that least",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("cpuBound = %q, lacks %q", got, want)
		}
	}
	// Without a CPU figure there is nothing to say.
	for _, x := range []struct {
		procs int
		l     Large
		d     LargeDelegation
	}{{0, l, d}, {2, Large{BareCopy: l.BareCopy}, d}, {2, l, LargeDelegation{}}} {
		if s := cpuBound(x.procs, x.l, x.d); s != "" {
			t.Errorf("cpuBound(%d, %+v, %+v) = %q, want nothing", x.procs, x.l, x.d, s)
		}
	}
}

// By default a large phase runs as many operations as 32 MiB of its
// payload make, from 5 to 32; --large-runs sets the number for all.
func TestLargeRunsBySize(t *testing.T) {
	for _, c := range []struct{ set, size, want int }{
		{0, 1 << 10, MaxLargeRuns},
		{0, 1 << 20, 32},
		{0, 4 << 20, 8},
		{0, 5 << 20, 6},
		{0, 16 << 20, DefaultLargeRuns},
		{0, 64 << 20, DefaultLargeRuns},
		{3, 1 << 20, 3},
		{40, 16 << 20, 40},
	} {
		if got := (Options{LargeRuns: c.set}).largeRuns(c.size); got != c.want {
			t.Errorf("LargeRuns %d: %d runs of %d bytes, want %d", c.set, got, c.size, c.want)
		}
	}
}

func TestOptionsValidateReportsEveryProblem(t *testing.T) {
	o := Options{Duration: -time.Second, Concurrency: []int{0, 5000}, Payload: maxPayload + 1, Stores: []StoreKind{"tape"}}
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	for _, s := range []string{"duration", "concurrency 0", "concurrency 5000", "payload", `"tape"`} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}
}

func TestSummariseNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	l := summarise(ds)
	if l.P50 != 50 || l.P90 != 90 || l.P99 != 99 || l.Max != 100 || l.Samples != 100 || l.Mean != 50 {
		t.Errorf("summarise(1..100) = %+v", l)
	}
	if l := summarise([]time.Duration{7}); l.P50 != 7 || l.P99 != 7 {
		t.Errorf("summarise([7]) = %+v", l)
	}
	if l := summarise(nil); l != (Latency{}) {
		t.Errorf("summarise(nil) = %+v", l)
	}
}
