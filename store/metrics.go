package store

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/internal/promread"
)

// Metrics are the store's Prometheus series: how long a durable write
// (one badger transaction, retries included) takes, and how the files of
// large offers and results were written (stage.go).
type Metrics struct {
	commit prometheus.Histogram
	files  *prometheus.CounterVec
}

// NewMetrics returns the store's metrics registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{commit: prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kith", Subsystem: "store", Name: "commit_seconds",
		Help:    "Time a store write takes to commit (with sync unless store.durable is off).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	}), files: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kith", Subsystem: "store", Name: "value_files_total",
		Help: "Files written for large offers and results, by how: staged (ahead of their commit, beside other work), " +
			"commit (inside the commit), dropped (staged, then not stored).",
	}, []string{"how"})}
	reg.MustRegister(m.commit, m.files)
	return m
}

// ValueFiles reads kith_store_value_files_total back, by how (staged,
// commit, dropped); a nil Metrics reads nothing.
func (m *Metrics) ValueFiles() map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return promread.Counters(m.files, "how")
}

// Commits reads back how many writes (transactions) kith_store_commit_seconds
// has observed; a nil Metrics reads 0.
func (m *Metrics) Commits() uint64 {
	if m == nil {
		return 0
	}
	return promread.Observations(m.commit)
}

// fileWritten counts a value file: how is staged, commit or dropped.
func (m *Metrics) fileWritten(how string) {
	if m != nil {
		m.files.WithLabelValues(how).Inc()
	}
}

func (m *Metrics) observeCommit(start time.Time) {
	if m != nil {
		m.commit.Observe(time.Since(start).Seconds())
	}
}
