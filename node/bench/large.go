package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Large is one large-payload comparison: the same bytes copied over a
// fresh bare stream and back, then echoed by a delegation (task and
// result) on each store kind, one at a time, in the same run.
type Large struct {
	Payload int `json:"payload_bytes"`
	// BareCopy is the baseline: write the payload on a new stream, read it
	// back as the other end echoes it.
	BareCopy Latency `json:"bare_copy"`
	// BareCopyCPU is the CPU of this process (both hosts) per bare copy.
	BareCopyCPU time.Duration `json:"bare_copy_cpu_per_op_ns"`
	// ForwardCopy is BareCopy in a delegation's shape: the other end
	// takes the whole payload before it sends it back (a provider takes
	// the whole task before it answers: the proof hashes the offer, the
	// executor takes the task whole), so the two directions do not
	// overlap.
	ForwardCopy Latency `json:"forward_copy"`
	// ForwardCopyCPU is the CPU per store-and-forward copy.
	ForwardCopyCPU time.Duration `json:"forward_copy_cpu_per_op_ns"`
	// Crypto is the cryptography the protocol does over the payload
	// beyond the bare copy's (CryptoWork), on one core: with
	// BareCopyCPU, the least CPU a delegation of this size takes.
	Crypto CryptoWork `json:"crypto"`
	// SyncedWrites is the second baseline, for the durable store, at a
	// payload of store.FileValueMin or more: write the payloads a durable
	// delegation stores (durableWrites of them) to new files in the
	// stores' directory, through the page cache, syncing each.
	SyncedWrites Latency `json:"synced_writes"`
	// SyncedWritesDirect is SyncedWrites past the page cache (O_DIRECT),
	// the other way a durable store writes a value file; no samples where
	// the platform or the file system does not take direct I/O.
	SyncedWritesDirect Latency `json:"synced_writes_direct"`
	// SyncedAppends is the second baseline at a payload under
	// store.FileValueMin, which a durable store makes durable in its
	// commit log's record: the payloads (durableWrites of them) appended
	// to a commit log, each synced before the next (store.LogWriter).
	SyncedAppends Latency `json:"synced_appends"`
	// DurableFloor is the least a durable delegation of this size could
	// take on these hosts and this disk: ForwardCopy's p50 plus the share
	// of the faster synced writes' p50 (or the synced appends', under
	// store.FileValueMin) that lies on its critical path
	// (durableFloorWrites of durableWrites).
	DurableFloor time.Duration `json:"durable_floor_ns"`
	// Delegations are the delegation round trips by store kind.
	Delegations []LargeDelegation `json:"delegations"`
}

// LargeDelegation is one store kind's large delegations.
type LargeDelegation struct {
	Store     StoreKind     `json:"store"`
	RoundTrip Latency       `json:"round_trip"`
	Errors    int           `json:"errors"`
	FirstErr  string        `json:"first_error,omitempty"`
	CPUPerOp  time.Duration `json:"cpu_per_op_ns"`
	// XBare is the delegation's p50 over the bare copy's p50.
	XBare float64 `json:"p50_x_bare_copy"`
	// XFloor is the delegation's p50 over Large.DurableFloor; durable
	// store only.
	XFloor float64 `json:"p50_x_durable_floor,omitempty"`
	// Skipped says why this store kind was not measured at this size.
	Skipped string `json:"skipped,omitempty"`
}

// goalLargeX: a large delegation's p50 is at most this many times the p50
// of copying the same bytes over a bare stream.
const goalLargeX = 2.0

// A durable delegation makes durableWrites payloads durable: the task
// and the result, on each side; and it acknowledges nothing before they
// are. durableFloorWrites of them lie on its critical path at the least:
// the requester's write of the task can go on while the task travels, the
// provider's writes of the task and of the result while the result
// travels (a provisional result, protocol 1.5, sent while the provider's
// store is quiet, as it is here with one delegation at a time), and the
// requester's write of the result comes before it answers. (In the bench
// both nodes share one disk, which must take all four in one round trip,
// so the least here is higher.)
const (
	durableWrites      = 4
	durableFloorWrites = 1
)

// runLarge measures each of opts.Large. Each operation runs alone (these
// are throughput figures of one transfer), opts.largeRuns times after one
// uncounted run.
func runLarge(ctx context.Context, w io.Writer, opts Options, dir string, hp *hostPair, sets map[StoreKind]*engines) (_ []Large, err error) {
	var out []Large
	if len(opts.Large) == 0 {
		return nil, nil
	}
	envelopeFor, err := envelopeRate(envelopeRateTime)
	if err != nil {
		return nil, err
	}
	for _, size := range opts.Large {
		text := payloadText(size)
		buf := make([]byte, size)
		l := Large{Payload: size}
		runs := opts.largeRuns(size)
		fmt.Fprintf(w, "measuring bare-copy of %s, %d runs\n", fmtBytes(size), runs)
		lat, cpu, errs, first := timeRuns(ctx, runs, func(ctx context.Context) error {
			return hp.echo(ctx, text, buf)
		})
		if errs > 0 {
			return out, fmt.Errorf("bench: bare copy of %s: %s", fmtBytes(size), first)
		}
		l.BareCopy, l.BareCopyCPU = lat, perOp(cpu, lat)
		fmt.Fprintf(w, "measuring store-and-forward copy of %s, %d runs\n", fmtBytes(size), runs)
		lat, cpu, errs, first = timeRuns(ctx, runs, func(ctx context.Context) error {
			return hp.forward(ctx, text, buf)
		})
		if errs > 0 {
			return out, fmt.Errorf("bench: store-and-forward copy of %s: %s", fmtBytes(size), first)
		}
		l.ForwardCopy, l.ForwardCopyCPU = lat, perOp(cpu, lat)
		fmt.Fprintf(w, "timing the proof's hashes and the envelope over %s\n", fmtBytes(size))
		l.Crypto = measureCryptoWork(text, envelopeFor)
		if slices.Contains(opts.Stores, StoreDurable) {
			probeDir, perr := os.MkdirTemp(dir, "synced-writes-")
			if perr != nil {
				return out, fmt.Errorf("bench: %w", perr)
			}
			// Removed at the end, not now: the delegations' files would
			// take the pages it frees, which the probe's own writes did
			// not get (writeProbe).
			defer func() { err = errors.Join(err, os.RemoveAll(probeDir)) }()
			if perr := l.measureWrites(ctx, w, opts, probeDir, text); perr != nil {
				return out, perr
			}
		}
		budget := max(executor.EstimateTokens(string(text)), 4096)
		for _, k := range opts.Stores {
			e := sets[k]
			if max := e.a.st.MaxValue(); max < size {
				// The in-memory store is for tests: badger keeps
				// every value inline there, and caps it.
				l.Delegations = append(l.Delegations, LargeDelegation{Store: k,
					Skipped: fmt.Sprintf("a %s store holds values up to %s", k, fmtBytes(max))})
				continue
			}
			switchTo(sets, e, hp)
			fmt.Fprintf(w, "measuring delegation of %s (%s store), %d runs\n", fmtBytes(size), k, runs)
			lat, cpu, errs, first := timeRuns(ctx, runs, func(ctx context.Context) error {
				_, err := e.delegateBudget(ctx, string(text), budget)
				return err
			})
			d := LargeDelegation{Store: k, RoundTrip: lat, Errors: errs, FirstErr: first, XBare: ratio(lat.P50, l.BareCopy.P50)}
			if k == StoreDurable {
				d.XFloor = ratio(lat.P50, l.DurableFloor)
			}
			d.CPUPerOp = perOp(cpu, lat)
			l.Delegations = append(l.Delegations, d)
			if err := ctx.Err(); err != nil {
				return out, err
			}
		}
		out = append(out, l)
		runtime.GC() // the next size starts without this one's garbage
	}
	return out, nil
}

// measureWrites times what making this payload durable costs on the
// stores' disk, the way a durable store writes it: to files of its own
// from store.FileValueMin, in its commit log's record below; and sets the
// durable floor from it. probeDir is a directory of its own, which the
// caller removes.
func (l *Large) measureWrites(ctx context.Context, w io.Writer, opts Options, probeDir string, text []byte) (err error) {
	runs := opts.largeRuns(len(text))
	if len(text) < store.FileValueMin {
		lw, err := store.NewLogWriter(probeDir)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer func() { err = errors.Join(err, lw.Close()) }()
		fmt.Fprintf(w, "measuring %d synced log appends of %s to %s, %d runs\n", durableWrites, fmtBytes(len(text)), probeDir, runs)
		lat, _, errs, first := timeRuns(ctx, runs, func(context.Context) error {
			lw.Rewind()
			for range durableWrites {
				if err := lw.Append(text); err != nil {
					return err
				}
			}
			return nil
		})
		if errs > 0 {
			return fmt.Errorf("bench: synced log appends of %s: %s", fmtBytes(len(text)), first)
		}
		l.SyncedAppends = lat
		l.DurableFloor = l.ForwardCopy.P50 + lat.P50*durableFloorWrites/durableWrites
		return nil
	}
	probe := &writeProbe{w: store.NewFileWriter(), dir: probeDir}
	for _, direct := range []bool{false, true} {
		how, into := "through the page cache", &l.SyncedWrites
		if direct {
			how, into = "with O_DIRECT", &l.SyncedWritesDirect
		}
		fmt.Fprintf(w, "measuring %d synced writes of %s %s to %s, %d runs\n", durableWrites, fmtBytes(len(text)), how, probeDir, runs)
		lat, _, errs, first := timeRuns(ctx, runs, func(context.Context) error {
			return probe.writes(text, durableWrites, direct)
		})
		if direct && probe.noDirect {
			fmt.Fprintf(w, "  direct I/O not available in %s: skipped\n", probeDir)
			continue
		}
		if errs > 0 {
			return fmt.Errorf("bench: synced writes of %s %s: %s", fmtBytes(len(text)), how, first)
		}
		*into = lat
	}
	fastest := l.SyncedWrites.P50
	if l.SyncedWritesDirect.Samples > 0 {
		fastest = min(fastest, l.SyncedWritesDirect.P50)
	}
	l.DurableFloor = l.ForwardCopy.P50 + fastest*durableFloorWrites/durableWrites
	return nil
}

// envelopeRateTime is how long runLarge times the envelope's rate.
const envelopeRateTime = 200 * time.Millisecond

// perOp is cpu spread over lat's samples; 0 without samples.
func perOp(cpu time.Duration, lat Latency) time.Duration {
	if lat.Samples == 0 {
		return 0
	}
	return cpu / time.Duration(lat.Samples)
}

// timeRuns runs op once uncounted, then n times, one after another, and
// returns the timings of those that succeeded and the CPU time they took.
func timeRuns(ctx context.Context, n int, op func(context.Context) error) (lat Latency, cpu time.Duration, errs int, first string) {
	run := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		t0 := time.Now()
		err := op(ctx)
		return time.Since(t0), err
	}
	if _, err := run(); err != nil {
		return Latency{}, 0, 1, err.Error()
	}
	var ds []time.Duration
	c0, okCPU := cpuTime()
	for range n {
		d, err := run()
		if err != nil {
			if errs == 0 {
				first = err.Error()
			}
			errs++
			continue
		}
		ds = append(ds, d)
	}
	if c1, ok := cpuTime(); ok && okCPU {
		cpu = c1 - c0
	}
	return summarise(ds), cpu, errs, first
}

func largeGoals(r Report) []Goal {
	var out []Goal
	// Judged on the durable store, the one a node runs by default.
	for _, l := range r.Large {
		for _, k := range []StoreKind{StoreDurable} {
			g := Goal{
				Name:   fmt.Sprintf("%s delegation, %s store", fmtBytes(l.Payload), k),
				Target: fmt.Sprintf("p50 ≤ %.0f× copying it over a bare stream", goalLargeX),
				Limit:  goalLargeX,
				Status: GoalNotMeasured,
			}
			for _, d := range l.Delegations {
				if d.Store != k || d.Skipped != "" || l.BareCopy.Samples == 0 {
					continue
				}
				g.Value = d.XBare
				g.Measured = fmt.Sprintf("%.2f× (%s vs %s; %.0f MiB/s vs %.0f MiB/s)", d.XBare,
					fmtDur(d.RoundTrip.P50), fmtDur(l.BareCopy.P50),
					mibPerSec(l.Payload, d.RoundTrip.P50), mibPerSec(l.Payload, l.BareCopy.P50))
				if l.DurableFloor > 0 {
					g.Measured += fmt.Sprintf("; durable floor %s = %.2f× the bare copy (store and forward alone %.2f×), delegation %.2f× the floor",
						fmtDur(l.DurableFloor), ratio(l.DurableFloor, l.BareCopy.P50), ratio(l.ForwardCopy.P50, l.BareCopy.P50), d.XFloor)
				}
				g.Measured += cpuBound(r.GOMAXPROCS, l, d)
				g.Status = GoalMissed
				if d.Errors == 0 && g.Value <= g.Limit {
					g.Status = GoalOK
				}
			}
			out = append(out, g)
		}
	}
	return out
}

// cpuBound says what d's CPU allows on procs cores, beside the least CPU
// a delegation of this size needs: the bare copy's and the protocol's
// cryptography (CryptoWork). Where the hosts share few cores, as in the
// bench, CPU bounds a large delegation: it cannot take less than its CPU
// over the cores, and kith's own share of that CPU is what it could cut.
// Empty when the CPU was not measured.
func cpuBound(procs int, l Large, d LargeDelegation) string {
	if procs <= 0 || d.CPUPerOp <= 0 || l.BareCopyCPU <= 0 || l.BareCopy.P50 <= 0 {
		return ""
	}
	least := l.BareCopyCPU + l.Crypto.Total()
	at := func(cpu time.Duration) time.Duration { return cpu / time.Duration(procs) }
	return fmt.Sprintf("; CPU %s a delegation, %.1f× the bare copy's %s, where that and the proof's hashes and the envelope (%s) need %s: "+
		"on %d cores at least %s = %.2f× the bare copy at this CPU, %s = %.2f× at that least",
		fmtDur(d.CPUPerOp), ratio(d.CPUPerOp, l.BareCopyCPU), fmtDur(l.BareCopyCPU), fmtDur(l.Crypto.Total()), fmtDur(least),
		procs, fmtDur(at(d.CPUPerOp)), ratio(at(d.CPUPerOp), l.BareCopy.P50), fmtDur(at(least)), ratio(at(least), l.BareCopy.P50))
}

func writeLarge(w io.Writer, r Report) error {
	if len(r.Large) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nlarge payloads, one at a time (task and result each this size; bare copy: the same bytes there and back on a new stream,\n"+
		"echoed as they come; store and forward: sent back once all have come, as a delegation must)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "payload\tstore\truns\tp50\tmax\tMiB/s\t× bare copy\t× durable floor\tcpu/op\terrors\t")
	for _, l := range r.Large {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%s\t%s\t%s\t%d\t\n", fmtBytes(l.Payload), "bare copy", l.BareCopy.Samples,
			fmtDur(l.BareCopy.P50), fmtDur(l.BareCopy.Max), mibPerSec(l.Payload, l.BareCopy.P50), "1.00×", "-", cpuOrDash(l.BareCopyCPU), 0)
		if l.ForwardCopy.Samples > 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.2f×\t%s\t%s\t%d\t\n", fmtBytes(l.Payload), "store-and-forward copy", l.ForwardCopy.Samples,
				fmtDur(l.ForwardCopy.P50), fmtDur(l.ForwardCopy.Max), mibPerSec(l.Payload, l.ForwardCopy.P50), ratio(l.ForwardCopy.P50, l.BareCopy.P50), "-",
				cpuOrDash(l.ForwardCopyCPU), 0)
		}
		if c := l.Crypto.Total(); c > 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.2f×\t%s\t%s\t%d\t\n", fmtBytes(l.Payload), "proof hashes + envelope, 1 core", cryptoWorkRuns,
				fmtDur(c), "-", mibPerSec(l.Payload, c), ratio(c, l.BareCopy.P50), "-", fmtDur(c), 0)
		}
		for _, sw := range []struct {
			how string
			lat Latency
		}{
			{fmt.Sprintf("%d synced writes, page cache", durableWrites), l.SyncedWrites},
			{fmt.Sprintf("%d synced writes, O_DIRECT", durableWrites), l.SyncedWritesDirect},
			{fmt.Sprintf("%d synced log appends", durableWrites), l.SyncedAppends},
		} {
			if sw.lat.Samples > 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.2f×\t%s\t%s\t%d\t\n", fmtBytes(l.Payload), sw.how,
					sw.lat.Samples, fmtDur(sw.lat.P50), fmtDur(sw.lat.Max),
					mibPerSec(durableWrites*l.Payload, sw.lat.P50), ratio(sw.lat.P50, l.BareCopy.P50), "-", "-", 0)
			}
		}
		for _, d := range l.Delegations {
			if d.Skipped != "" {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t\n", fmtBytes(l.Payload), d.Store)
				continue
			}
			floor := "-"
			if d.XFloor > 0 {
				floor = fmt.Sprintf("%.2f×", d.XFloor)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%.0f\t%.2f×\t%s\t%s\t%d\t\n", fmtBytes(l.Payload), d.Store, d.RoundTrip.Samples,
				fmtDur(d.RoundTrip.P50), fmtDur(d.RoundTrip.Max), mibPerSec(l.Payload, d.RoundTrip.P50), d.XBare,
				floor, fmtDur(d.CPUPerOp), d.Errors)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var files, appends bool
	for _, l := range r.Large {
		files = files || l.SyncedWrites.Samples > 0
		appends = appends || l.SyncedAppends.Samples > 0
	}
	if files {
		fmt.Fprintf(w, "%d synced writes: the payload written %d times, to new files beside the stores, each synced before the next (MiB/s counts all %d),\n"+
			"through the page cache and past it, the two ways a durable store writes a value of %s or more to a file of its own\n",
			durableWrites, durableWrites, durableWrites, fmtBytes(store.FileValueMin))
	}
	if appends {
		fmt.Fprintf(w, "%d synced log appends: the payload appended %d times to a commit log, each synced before the next (MiB/s counts all %d),\n"+
			"as a durable store makes a value under %s durable, in its commit log's record\n",
			durableWrites, durableWrites, durableWrites, fmtBytes(store.FileValueMin))
	}
	fmt.Fprintf(w, "proof hashes + envelope: the payload's %s four times (offer and output, on each side: the proof digest two nodes\n"+
		"here agree on) and the envelope's seal and open of it twice (task and result), on one core: the cryptography a delegation adds\n"+
		"to the bare copy's TLS\n", protocol.FastestDigest())
	if files || appends {
		fmt.Fprintf(w, "each: what a durable delegation stores, task and result on each side; durable floor: store-and-forward copy p50 + %d/%d of the\n"+
			"faster synced writes' (or the appends') p50, the requester's write of the result, which lies on the delegation's critical path (the\n"+
			"others overlap the task's and the result's trips; on one shared disk, as here, they compete with it)\n",
			durableFloorWrites, durableWrites)
	}
	for _, l := range r.Large {
		for _, d := range l.Delegations {
			if d.Errors > 0 {
				fmt.Fprintf(w, "  %s %s: first error: %s\n", fmtBytes(l.Payload), d.Store, d.FirstErr)
			}
			if d.Skipped != "" {
				fmt.Fprintf(w, "  %s %s: skipped: %s\n", fmtBytes(l.Payload), d.Store, d.Skipped)
			}
		}
	}
	return nil
}

// cpuOrDash is a CPU figure, or "-" where none was measured.
func cpuOrDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmtDur(d)
}

// mibPerSec is the payload's rate, counting it once (as a user does: the
// size of the document over the time it took).
func mibPerSec(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / (1 << 20) / d.Seconds()
}

func fmtBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
