package discovery

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/internal/promread"
)

// Counters counts what the sources heard: hints by source
// (kith_discovery_hints_total) and input dropped by source and reason
// (kith_discovery_dropped_total: "mdns/bad_txt", "gossip/forged", ...).
// The Prometheus counters are the only record; Get and Snapshot read them
// back for the API and for tests. NewCounters registers them; the zero
// value counts without exporting (a source run on its own) and, like
// the rest, is safe for concurrent use.
type Counters struct {
	once    sync.Once
	hints   *prometheus.CounterVec
	dropped *prometheus.CounterVec
}

// NewCounters returns counters registered on reg (nil: not exported).
func NewCounters(reg prometheus.Registerer) *Counters {
	c := &Counters{}
	c.init()
	if reg != nil {
		reg.MustRegister(c.hints, c.dropped)
	}
	return c
}

func (c *Counters) init() {
	c.once.Do(func() {
		c.hints = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kith", Subsystem: "discovery", Name: "hints_total",
			Help: "Peer hints heard from a discovery source (unverified), by source.",
		}, []string{"source"})
		c.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kith", Subsystem: "discovery", Name: "dropped_total",
			Help: "Discovery input dropped as bad or unwanted, by source and reason.",
		}, []string{"source", "reason"})
	})
}

// Hint counts one hint from source.
func (c *Counters) Hint(source Source) {
	c.init()
	c.hints.WithLabelValues(string(source)).Inc()
}

// Drop counts one piece of input dropped by source for reason, and logs it
// at debug level with args. reason is one of a source's fixed words,
// never text from the network: it is a label value.
func (c *Counters) Drop(log *slog.Logger, source Source, reason string, args ...any) {
	c.init()
	c.dropped.WithLabelValues(string(source), reason).Inc()
	if log != nil {
		log.Debug("discovery input dropped", append([]any{"source", source, "reason", reason}, args...)...)
	}
}

// Get returns one drop counter, by its "source/reason" key.
func (c *Counters) Get(key string) uint64 { return c.Snapshot()[key] }

// Snapshot returns every drop counter by "source/reason".
func (c *Counters) Snapshot() map[string]uint64 {
	c.init()
	return promread.Counters(c.dropped, "source", "reason")
}

// Keys returns the drop counter keys in order.
func (c *Counters) Keys() []string { return slices.Sorted(maps.Keys(c.Snapshot())) }
