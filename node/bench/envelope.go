package bench

import (
	"fmt"
	"io"

	"github.com/kithmesh/kith/crypto"
)

// Envelope compares the envelope's frame path with raw AES-256-GCM, both
// sealing and opening into reused buffers, measured side by side.
type Envelope struct {
	Size int `json:"size_bytes"`
	// EnvelopeRate and RawRate are plaintext bytes per second, sealed and
	// opened.
	EnvelopeRate float64 `json:"envelope_bytes_per_sec"`
	RawRate      float64 `json:"raw_bytes_per_sec"`
	// Ratio is EnvelopeRate over RawRate.
	Ratio float64 `json:"ratio"`
}

// envelopeSize is the frame size the envelope goal is read at.
const envelopeSize = 1 << 20

// goalEnvelope: the envelope seals and opens at least this fraction of raw
// AES-256-GCM's rate.
const goalEnvelope = 0.9

func measureEnvelope(w io.Writer, opts Options) (Envelope, error) {
	fmt.Fprintf(w, "measuring envelope seal+open vs raw AES-256-GCM at %s for %s\n", fmtBytes(envelopeSize), opts.Duration)
	r, err := crypto.BenchSealOpen(envelopeSize, opts.Duration)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{Size: envelopeSize, EnvelopeRate: r.Envelope, RawRate: r.Raw, Ratio: r.Ratio()}, nil
}

func envelopeGoal(r Report) Goal {
	g := Goal{
		Name:   fmt.Sprintf("envelope seal+open, %s frames", fmtBytes(envelopeSize)),
		Target: fmt.Sprintf("≥ %.0f%% of raw AES-256-GCM", 100*goalEnvelope),
		Limit:  goalEnvelope,
		Status: GoalNotMeasured,
	}
	e := r.Envelope
	if e == nil || e.RawRate <= 0 {
		return g
	}
	g.Value = e.Ratio
	g.Measured = fmt.Sprintf("%.0f%% (%.0f MiB/s vs %.0f MiB/s)", 100*e.Ratio, e.EnvelopeRate/(1<<20), e.RawRate/(1<<20))
	g.Status = GoalMissed
	if g.Value >= g.Limit {
		g.Status = GoalOK
	}
	return g
}
