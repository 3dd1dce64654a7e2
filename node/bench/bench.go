package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
)

// Options configure a run. The zero value runs the default bench.
type Options struct {
	// Duration is each phase's measured window; 3s if 0.
	Duration time.Duration
	// Warmup runs before each window, uncounted; Duration/10, between 50ms
	// and 1s, if 0.
	Warmup time.Duration
	// Concurrency lists the numbers of concurrent workers; each phase runs
	// once per entry. {1, 64} if empty.
	Concurrency []int
	// Payload is the bytes each operation echoes; 64 if 0.
	Payload int
	// Stores lists the delegation phases' store kinds; AllStores if empty.
	Stores []StoreKind
	// Dir is where the on-disk stores and the fsync probe live (in a
	// temporary directory that Run removes); os.TempDir() if "".
	Dir string
	// FsyncSamples is how many syncs the fsync probe times; 200 if 0.
	FsyncSamples int
	// Large lists the payload sizes of the large-payload phases (each
	// copied over a bare stream, then delegated on every store kind);
	// DefaultLarge if nil, none if empty and not nil.
	Large []int
	// LargeRuns is how many timed operations each large phase runs, after
	// one uncounted; if 0, as many as LargeRunBytes of the payload make,
	// from DefaultLargeRuns to MaxLargeRuns (largeRuns).
	LargeRuns int
}

// DefaultLargeRuns is the fewest timed operations a large phase runs by
// default, those of the largest payloads. Each large figure is a p50 of
// them: with three, one slow run in the bench's shared disk or page cache
// moved the 16 MiB ratio between 4.1 and 8.7× from run to run of the
// same build.
const DefaultLargeRuns = 5

// A smaller payload's phases run more operations by default, up to
// LargeRunBytes of payload each. In three runs of one build with five at
// 1 MiB, the durable delegation's p50 spread over 10.9–15.1 ms and the
// bare copy's over 2.75–4.18 ms; in three with 32, alternating with
// those, over 10.7–13.2 and 2.41–2.83 ms: a slow run or two move a p50
// of five, one of 32 much less.
const (
	LargeRunBytes = 32 << 20
	MaxLargeRuns  = 32
)

// largeRuns is how many timed operations each phase of a payload of size
// bytes runs.
func (o Options) largeRuns(size int) int {
	if o.LargeRuns > 0 {
		return o.LargeRuns
	}
	return min(max(LargeRunBytes/max(size, 1), DefaultLargeRuns), MaxLargeRuns)
}

// DefaultLarge is the large payloads a run measures by default.
var DefaultLarge = []int{1 << 20, 16 << 20}

// Limits on Options, so that a typo cannot start ten thousand workers.
const (
	maxConcurrency = 1024
	maxDuration    = 10 * time.Minute
)

func (o *Options) setDefaults() {
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = min(max(o.Duration/10, 50*time.Millisecond), time.Second)
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 64}
	}
	if o.Payload == 0 {
		o.Payload = 64
	}
	if len(o.Stores) == 0 {
		o.Stores = AllStores
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	if o.FsyncSamples == 0 {
		o.FsyncSamples = 200
	}
	if o.Large == nil {
		o.Large = DefaultLarge
	}
}

// Validate reports every problem with o at once.
func (o Options) Validate() error {
	var errs []error
	if o.Duration < 0 || o.Duration > maxDuration {
		errs = append(errs, fmt.Errorf("bench: duration %s: want between 0 and %s", o.Duration, maxDuration))
	}
	if o.Warmup < 0 || o.Warmup > maxDuration {
		errs = append(errs, fmt.Errorf("bench: warm-up %s: want between 0 and %s", o.Warmup, maxDuration))
	}
	for _, c := range o.Concurrency {
		if c < 1 || c > maxConcurrency {
			errs = append(errs, fmt.Errorf("bench: concurrency %d: want 1 to %d", c, maxConcurrency))
		}
	}
	if o.Payload < 0 || o.Payload > maxPayload {
		errs = append(errs, fmt.Errorf("bench: payload %d bytes: want 1 to %d", o.Payload, maxPayload))
	}
	for _, k := range o.Stores {
		if !k.valid() {
			errs = append(errs, fmt.Errorf("bench: store %q: want one of %v", k, AllStores))
		}
	}
	if o.FsyncSamples < 0 {
		errs = append(errs, fmt.Errorf("bench: fsync samples %d: want at least 1", o.FsyncSamples))
	}
	for _, n := range o.Large {
		if n < 1 || n > protocol.MaxPayload {
			errs = append(errs, fmt.Errorf("bench: large payload %d bytes: want 1 to %d", n, protocol.MaxPayload))
		}
	}
	if o.LargeRuns < 0 || o.LargeRuns > 1000 {
		errs = append(errs, fmt.Errorf("bench: large runs %d: want 1 to 1000, or 0 for as many as %s of the payload make (%d to %d)", o.LargeRuns, fmtBytes(LargeRunBytes), DefaultLargeRuns, MaxLargeRuns))
	}
	return errors.Join(errs...)
}

// PhaseName says what a phase measured.
type PhaseName string

const (
	PhaseBareEcho   PhaseName = "bare-echo"
	PhaseDelegation PhaseName = "delegation"
)

// Phase is one measured workload at one concurrency.
type Phase struct {
	Name        PhaseName     `json:"name"`
	Store       StoreKind     `json:"store,omitempty"` // delegation phases only
	Concurrency int           `json:"concurrency"`
	Ops         int           `json:"ops"`
	Errors      int           `json:"errors"`
	FirstError  string        `json:"first_error,omitempty"`
	Window      time.Duration `json:"window_ns"`
	OpsPerSec   float64       `json:"ops_per_sec"`
	RoundTrip   Latency       `json:"round_trip"`
	// CPUPerOp is the CPU time the process (both hosts, both engines)
	// spent per operation during the window, and CPUBusy that time as a
	// fraction of the window times GOMAXPROCS: near 1, the phase was bound
	// by the CPU; well below, by waiting. Zero where unknown.
	CPUPerOp time.Duration `json:"cpu_per_op_ns"`
	CPUBusy  float64       `json:"cpu_busy"`
	// OtherLoad is the share of the machine's CPUs that other processes
	// kept busy during the window (Linux only): figures from a phase that
	// shared the machine are not comparable with one that did not.
	OtherLoad float64 `json:"other_load"`
	// StreamsPerOp is how many delegation streams the requester opened per
	// operation counted (delegation phases only): below 1, streams kept
	// after a delegation carried later ones (protocol 1.4, opened in the
	// warm-up or shared); above 1, attempts failed and the engine
	// reattached, which its round trips include.
	StreamsPerOp float64 `json:"streams_per_op"`
}

// Ratio compares one delegation phase with the bare echo at the same
// concurrency, measured in the same run: round trips as multiples of the
// echo's, throughput as a fraction of it.
type Ratio struct {
	Store       StoreKind `json:"store"`
	Concurrency int       `json:"concurrency"`
	P50         float64   `json:"p50_x_bare"`
	P99         float64   `json:"p99_x_bare"`
	Throughput  float64   `json:"throughput_x_bare"`
}

// Goal statuses.
const (
	GoalOK          = "OK"
	GoalMissed      = "MISSED"
	GoalNotMeasured = "NOT MEASURED"
)

// Goal is one target and how this run did against it.
type Goal struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"` // compared with Limit
	Limit    float64 `json:"limit"`
	Status   string  `json:"status"`
}

// Report is everything one run measured.
type Report struct {
	Started     time.Time     `json:"started"`
	GoVersion   string        `json:"go_version"`
	OS          string        `json:"os"`
	Arch        string        `json:"arch"`
	CPUs        int           `json:"cpus"`
	GOMAXPROCS  int           `json:"gomaxprocs"`
	Payload     int           `json:"payload_bytes"`
	Window      time.Duration `json:"window_ns"`
	Warmup      time.Duration `json:"warmup_ns"`
	Concurrency []int         `json:"concurrency"`
	// Slots is the provider's MaxRemoteConcurrent: twice the highest
	// concurrency, so that no delegation is refused busy (a default node
	// has 4).
	Slots int `json:"slots"`
	// Connection is the address the requester host's connection to the
	// provider host runs over.
	Connection string `json:"connection"`
	// Dir and FS are where the on-disk stores and the fsync probe ran.
	Dir   string  `json:"dir"`
	FS    string  `json:"fs,omitempty"`
	Fsync Latency `json:"fsync"`
	// Proof is the result proof's public-key work on this CPU.
	Proof ProofCost `json:"proof"`
	// Anatomy is what one delegation writes to the stores, and when.
	Anatomy Anatomy `json:"anatomy"`
	Phases  []Phase `json:"phases"`
	Ratios  []Ratio `json:"ratios"`
	// Large is the large-payload comparisons, one per Options.Large size.
	Large []Large `json:"large,omitempty"`
	// Envelope is the envelope's seal and open against raw AES-GCM.
	Envelope *Envelope `json:"envelope,omitempty"`
	Goals    []Goal    `json:"goals"`
}

// Run measures, writing progress and then the report's table to w, and
// returns the report. It stops every host, engine and store it started and
// removes its temporary directory before it returns, also on error.
func Run(ctx context.Context, opts Options, w io.Writer) (_ Report, err error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	opts.Concurrency = slices.Clone(opts.Concurrency)
	slices.Sort(opts.Concurrency)
	opts.Concurrency = slices.Compact(opts.Concurrency)

	r := Report{
		Started: time.Now(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Payload: opts.Payload, Window: opts.Duration, Warmup: opts.Warmup, Concurrency: opts.Concurrency,
	}
	dir, err := os.MkdirTemp(opts.Dir, "kith-bench-")
	if err != nil {
		return r, fmt.Errorf("bench: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	r.Dir, r.FS = dir, fsType(dir)

	fmt.Fprintf(w, "starting two libp2p hosts on loopback\n")
	hp, err := newHostPair(ctx)
	if err != nil {
		return r, err
	}
	defer func() { err = errors.Join(err, hp.Close()) }()
	r.Connection = hp.remoteAddr

	slots := max(4, 2*slices.Max(opts.Concurrency))
	r.Slots = slots
	// The profile's budget cap admits the largest payload; each operation
	// asks for what its own payload needs.
	budget := max(executor.EstimateTokens(string(payloadText(opts.Payload))), 4096)
	capBudget := budget
	for _, n := range opts.Large {
		capBudget = max(capBudget, executor.EstimateTokens(string(payloadText(n))))
	}
	sets := map[StoreKind]*engines{}
	defer func() {
		for _, k := range opts.Stores {
			if e := sets[k]; e != nil {
				err = errors.Join(err, e.Close())
			}
		}
	}()
	for _, k := range opts.Stores {
		e, err := startEngines(ctx, hp, k, dir, slots, budget, capBudget)
		if err != nil {
			return r, fmt.Errorf("bench: %s engines: %w", k, err)
		}
		sets[k] = e
	}

	fmt.Fprintf(w, "timing %d fsyncs of 4 KiB in %s (%s)\n", opts.FsyncSamples, dir, orUnknown(r.FS))
	if r.Fsync, err = measureFsync(ctx, dir, opts.FsyncSamples); err != nil {
		return r, err
	}
	fmt.Fprintf(w, "timing %d result proofs signed and verified\n", proofSamples)
	if r.Proof, err = measureProof(proofSamples); err != nil {
		return r, err
	}

	text := payloadText(opts.Payload)
	// One delegation, taken apart: on the durable store when there is one,
	// where each write costs the most.
	first := sets[opts.Stores[len(opts.Stores)-1]]
	if e := sets[StoreDurable]; e != nil {
		first = e
	}
	switchTo(sets, first, hp)
	if r.Anatomy, err = first.anatomy(ctx, string(text)); err != nil {
		return r, fmt.Errorf("bench: first delegation: %w", err)
	}
	fmt.Fprintf(w, "starting the A2A gateway and a plain a2a-go echo agent on loopback HTTP\n")
	a2aSrv, err := startA2A(ctx, dir, slices.Max(opts.Concurrency), budget)
	if err != nil {
		return r, fmt.Errorf("bench: A2A servers: %w", err)
	}
	defer func() { err = errors.Join(err, a2aSrv.Close()) }()

	bufs := make([][]byte, slices.Max(opts.Concurrency))
	for i := range bufs {
		bufs[i] = make([]byte, opts.Payload)
	}
	for _, conc := range opts.Concurrency {
		p := measure(ctx, w, &r, opts, PhaseBareEcho, "", conc, nil, func(ctx context.Context, w int) error {
			return hp.echo(ctx, text, bufs[w])
		})
		if err := ctx.Err(); err != nil {
			return r, err
		}
		r.Phases = append(r.Phases, p)
		for _, k := range opts.Stores {
			e := sets[k]
			switchTo(sets, e, hp)
			p := measure(ctx, w, &r, opts, PhaseDelegation, k, conc, &e.streams, func(ctx context.Context, _ int) error {
				_, err := e.delegate(ctx, string(text))
				return err
			})
			if err := ctx.Err(); err != nil {
				return r, err
			}
			r.Phases = append(r.Phases, p)
		}
		for _, x := range []struct {
			name PhaseName
			c    *a2aclient.Client
		}{{PhaseA2AGateway, a2aSrv.gw}, {PhaseA2AAgent, a2aSrv.raw}} {
			p := measure(ctx, w, &r, opts, x.name, "", conc, nil, func(ctx context.Context, _ int) error {
				return send(ctx, x.c, string(text))
			})
			if err := ctx.Err(); err != nil {
				return r, err
			}
			r.Phases = append(r.Phases, p)
		}
	}
	if r.Large, err = runLarge(ctx, w, opts, dir, hp, sets); err != nil {
		return r, err
	}
	env, err := measureEnvelope(w, opts)
	if err != nil {
		return r, fmt.Errorf("bench: envelope: %w", err)
	}
	r.Envelope = &env
	r.Ratios = ratios(r.Phases)
	r.Goals = append(append(goals(r), a2aGoal(r)), largeGoals(r)...)
	r.Goals = append(r.Goals, envelopeGoal(r))
	fmt.Fprintln(w)
	if err := r.WriteTable(w); err != nil {
		return r, err
	}
	return r, nil
}

// measure runs one phase and derives its figures. streams, if not nil,
// counts the delegation streams opened.
func measure(ctx context.Context, w io.Writer, r *Report, opts Options, name PhaseName, k StoreKind, conc int,
	streams *atomic.Int64, op func(context.Context, int) error) Phase {
	label := string(name)
	if k != "" {
		label += " (" + string(k) + " store)"
	}
	fmt.Fprintf(w, "measuring %s at concurrency %d for %s\n", label, conc, opts.Duration)
	res := runLoad(ctx, conc, opts.Warmup, opts.Duration, streams, op)
	p := Phase{
		Name: name, Store: k, Concurrency: conc,
		Ops: res.ops, Errors: res.errors, FirstError: res.firstError,
		Window: res.window, OpsPerSec: float64(res.ops) / res.window.Seconds(), RoundTrip: res.latency,
	}
	if res.cpu > 0 && res.ops > 0 {
		p.CPUPerOp = res.cpu / time.Duration(res.ops)
		p.CPUBusy = res.cpu.Seconds() / (res.window.Seconds() * float64(r.GOMAXPROCS))
	}
	if streams != nil && res.ops > 0 {
		p.StreamsPerOp = float64(res.counted) / float64(res.ops)
	}
	if res.machineCPU > 0 {
		p.OtherLoad = max(0, (res.machineCPU-res.cpu).Seconds()/(res.window.Seconds()*float64(r.CPUs)))
	}
	return p
}

// payloadText is n bytes of words, so that the echo executor streams
// several of them as a real task's output would.
func payloadText(n int) []byte {
	const words = "kith delegates agent tasks between home lab machines "
	return []byte(strings.Repeat(words, n/len(words)+1)[:n])
}

func orUnknown(s string) string {
	if s == "" {
		return "filesystem unknown"
	}
	return s
}
