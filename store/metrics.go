package store

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the store's Prometheus series: how long a durable write
// (one badger transaction, retries included) takes.
type Metrics struct {
	commit prometheus.Histogram
}

// NewMetrics returns the store's metrics registered on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{commit: prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kith", Subsystem: "store", Name: "commit_seconds",
		Help:    "Time a store write takes to commit (with sync unless store.durable is off).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
	})}
	reg.MustRegister(m.commit)
	return m
}

func (m *Metrics) observeCommit(start time.Time) {
	if m != nil {
		m.commit.Observe(time.Since(start).Seconds())
	}
}
