package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Goal targets. The latency goals are read at the lowest concurrency run
// (1 by default), where a round trip is not queueing behind others; the
// throughput goal at 64.
const (
	goalOverheadX       = 3.0 // in-memory delegation p50 ≤ 3× bare echo p50
	goalThroughputConc  = 64
	goalThroughputOps   = 2000.0           // durable delegations per second at 64 concurrent
	goalThroughputCores = 2                // the machine size the throughput goal is set for
	goalCPUPerOp        = time.Millisecond // CPU per durable delegation at 64 concurrent, both sides
)

func (r Report) phase(name PhaseName, k StoreKind, conc int) (Phase, bool) {
	for _, p := range r.Phases {
		if p.Name == name && p.Store == k && p.Concurrency == conc {
			return p, p.Ops > 0
		}
	}
	return Phase{}, false
}

// ratios compares each delegation phase with the bare echo of its
// concurrency.
func ratios(phases []Phase) []Ratio {
	r := Report{Phases: phases}
	var out []Ratio
	for _, p := range phases {
		if p.Name != PhaseDelegation || p.Ops == 0 {
			continue
		}
		bare, ok := r.phase(PhaseBareEcho, "", p.Concurrency)
		if !ok {
			continue
		}
		out = append(out, Ratio{
			Store: p.Store, Concurrency: p.Concurrency,
			P50:        ratio(p.RoundTrip.P50, bare.RoundTrip.P50),
			P99:        ratio(p.RoundTrip.P99, bare.RoundTrip.P99),
			Throughput: p.OpsPerSec / bare.OpsPerSec,
		})
	}
	return out
}

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// goals judges the run against kith's targets, honestly: a goal whose
// phases did not run, or ran with errors, is not met.
func goals(r Report) []Goal {
	var out []Goal
	latConc := slices.Min(r.Concurrency)
	at := fmt.Sprintf(" (concurrency %d)", latConc)

	g := Goal{
		Name:   "delegation overhead, in-memory store" + at,
		Target: fmt.Sprintf("p50 ≤ %.0f× bare echo p50", goalOverheadX),
		Limit:  goalOverheadX,
	}
	mem, okm := r.phase(PhaseDelegation, StoreMemory, latConc)
	bare, okb := r.phase(PhaseBareEcho, "", latConc)
	if okm && okb {
		g.Value = ratio(mem.RoundTrip.P50, bare.RoundTrip.P50)
		g.Measured = fmt.Sprintf("%.2f× (%s vs %s)", g.Value, fmtDur(mem.RoundTrip.P50), fmtDur(bare.RoundTrip.P50))
		if pr := r.Proof; pr.Sign.Samples > 0 && pr.Verify.Samples > 0 {
			// The bound leaves (goalOverheadX-1) echoes beside the round
			// trip itself; the proof alone takes this much of it.
			proof, room := pr.Sign.P50+pr.Verify.P50, time.Duration((goalOverheadX-1)*float64(bare.RoundTrip.P50))
			g.Measured += fmt.Sprintf("; result proof sign + verify %s = %.0f%% of the %s the bound leaves beside the round trip",
				fmtDur(proof), 100*ratio(proof, room), fmtDur(room))
		}
		g.Status = judge(g.Value <= g.Limit, mem, bare)
	} else {
		g.Status = GoalNotMeasured
	}
	out = append(out, g)

	g = Goal{
		Name:   "durable delegation latency" + at,
		Target: "p50 ≤ bare echo p50 + 2 × fsync p50",
		Limit:  1,
	}
	dur, okd := r.phase(PhaseDelegation, StoreDurable, latConc)
	if okd && okb && r.Fsync.Samples > 0 {
		bound := bare.RoundTrip.P50 + 2*r.Fsync.P50
		g.Value = ratio(dur.RoundTrip.P50, bound)
		g.Measured = fmt.Sprintf("%s vs %s + 2 × %s = %s (%.2f× the bound, %.1f fsyncs' worth)",
			fmtDur(dur.RoundTrip.P50), fmtDur(bare.RoundTrip.P50), fmtDur(r.Fsync.P50), fmtDur(bound), g.Value,
			float64(dur.RoundTrip.P50-bare.RoundTrip.P50)/float64(max(r.Fsync.P50, 1)))
		g.Status = judge(g.Value <= g.Limit, dur, bare)
	} else {
		g.Status = GoalNotMeasured
	}
	out = append(out, g)

	g = Goal{
		Name:   fmt.Sprintf("durable delegation throughput (concurrency %d)", goalThroughputConc),
		Target: fmt.Sprintf("≥ %.0f/s on %d cores (this machine: %d)", goalThroughputOps, goalThroughputCores, r.CPUs),
		Limit:  goalThroughputOps,
	}
	if dur, ok := r.phase(PhaseDelegation, StoreDurable, goalThroughputConc); ok {
		g.Value = dur.OpsPerSec
		g.Measured = fmt.Sprintf("%.0f/s", dur.OpsPerSec)
		if b, ok := r.phase(PhaseBareEcho, "", goalThroughputConc); ok {
			g.Measured += fmt.Sprintf(" (bare echo %.0f/s)", b.OpsPerSec)
		}
		g.Status = judge(g.Value >= g.Limit, dur)
	} else {
		g.Status = GoalNotMeasured
	}
	out = append(out, g)

	g = Goal{
		Name:   fmt.Sprintf("CPU per durable delegation, both sides (concurrency %d)", goalThroughputConc),
		Target: "≤ " + fmtDur(goalCPUPerOp),
		Limit:  goalCPUPerOp.Seconds(),
	}
	if dur, ok := r.phase(PhaseDelegation, StoreDurable, goalThroughputConc); ok && dur.CPUPerOp > 0 {
		g.Value = dur.CPUPerOp.Seconds()
		g.Measured = fmtDur(dur.CPUPerOp)
		if b, ok := r.phase(PhaseBareEcho, "", goalThroughputConc); ok && b.CPUPerOp > 0 {
			g.Measured += fmt.Sprintf(" (%.1f× a bare echo's %s)", float64(dur.CPUPerOp)/float64(b.CPUPerOp), fmtDur(b.CPUPerOp))
		}
		g.Status = judge(g.Value <= g.Limit, dur)
	} else {
		g.Status = GoalNotMeasured
	}
	return append(out, g)
}

func judge(met bool, phases ...Phase) string {
	for _, p := range phases {
		if p.Errors > 0 {
			return GoalMissed
		}
	}
	if met {
		return GoalOK
	}
	return GoalMissed
}

// WriteTable writes the report for people.
func (r Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "kith bench: %s %s/%s, %d CPUs (GOMAXPROCS %d), payload %d B, %s per phase after %s warm-up\n",
		r.GoVersion, r.OS, r.Arch, r.CPUs, r.GOMAXPROCS, r.Payload, r.Window, r.Warmup)
	fmt.Fprintf(w, "hosts connected over %s; provider remote slots %d (a default node has 4)\n", r.Connection, r.Slots)
	if r.Proof.Sign.Samples > 0 {
		fmt.Fprintf(w, "result proof (Ed25519) on this CPU: sign p50 %s, verify p50 %s over %d\n",
			fmtDur(r.Proof.Sign.P50), fmtDur(r.Proof.Verify.P50), r.Proof.Sign.Samples)
	}
	fmt.Fprintf(w, "fsync of a 4 KiB append in %s (%s): p50 %s, p99 %s over %d\n\n",
		r.Dir, orUnknown(r.FS), fmtDur(r.Fsync.P50), fmtDur(r.Fsync.P99), r.Fsync.Samples)

	a := r.Anatomy
	fmt.Fprintf(w, "one delegation (%s store, %s round trip) made %d store writes (transactions), requester %d, provider %d\n"+
		"(each store's own count; then the creates and events by the time each carries, events with the same time\n"+
		"written together; a requester's record carries the time Delegate began it, also when written with its result):\n",
		a.Store, fmtDur(a.RoundTrip), a.RequesterWrites+a.ProviderWrites, a.RequesterWrites, a.ProviderWrites)
	for _, s := range a.Steps {
		fmt.Fprintf(w, "  %8s  %-9s %s\n", "+"+fmtDur(s.At), s.Side, s.Write)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tstore\tconc\tops/s\tp50\tp90\tp99\tmax\tops\terrors\tstreams/op\tcpu/op\tcpu busy\tothers\t")
	for _, p := range r.Phases {
		store := string(p.Store)
		if store == "" {
			store = "-"
		}
		cpuOp, busy, others, streams := "-", "-", "-", "-"
		if p.Name == PhaseDelegation {
			streams = fmt.Sprintf("%.2f", p.StreamsPerOp)
		}
		if p.CPUPerOp > 0 {
			cpuOp, busy = fmtDur(p.CPUPerOp), fmt.Sprintf("%.0f%%", 100*p.CPUBusy)
		}
		if p.OtherLoad > 0 || p.CPUPerOp > 0 {
			others = fmt.Sprintf("%.0f%%", 100*p.OtherLoad)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", p.Name, store, p.Concurrency, p.OpsPerSec,
			fmtDur(p.RoundTrip.P50), fmtDur(p.RoundTrip.P90), fmtDur(p.RoundTrip.P99), fmtDur(p.RoundTrip.Max), p.Ops, p.Errors,
			streams, cpuOp, busy, others)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "streams/op: delegation streams opened per delegation (below 1: streams kept for the next offer, protocol 1.4;\n"+
		"above 1: failed attempts, reattached);\n"+
		"cpu/op: CPU time of this process (both nodes) per operation; cpu busy: of GOMAXPROCS;\n"+
		"others: share of all CPUs that other processes used meanwhile")
	busiest := 0.0
	for _, p := range r.Phases {
		if p.Errors > 0 {
			fmt.Fprintf(w, "  %s %s at %d: first error: %s\n", p.Name, p.Store, p.Concurrency, p.FirstError)
		}
		busiest = max(busiest, p.OtherLoad)
	}
	if busiest > 0.1 {
		fmt.Fprintf(w, "WARNING: other processes used up to %.0f%% of the CPUs during a phase: these figures are noisy\n", 100*busiest)
	}

	fmt.Fprintln(w, "\ndelegation vs bare echo at the same concurrency (round trip: × slower; throughput: fraction)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tconc\tp50\tp99\tops/s\t")
	for _, x := range r.Ratios {
		fmt.Fprintf(tw, "%s\t%d\t%.2f×\t%.2f×\t%.2f×\t\n", x.Store, x.Concurrency, x.P50, x.P99, x.Throughput)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := writeLarge(w, r); err != nil {
		return err
	}

	fmt.Fprintln(w, "\ngoals")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range r.Goals {
		measured := g.Measured
		if measured == "" {
			measured = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", g.Status, g.Name, g.Target, measured)
	}
	return tw.Flush()
}

// fmtDur prints a duration with three significant digits or so.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}
