// Package promread reads kith's own Prometheus counters back in process:
// the figures that status output, `kith` commands and tests show without
// scraping the node's /metrics. One reader, so that every package keys its
// counters the same way.
package promread

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counters returns the counters of v, keyed by the values of labels, in
// that order, joined with "/" ("peer/too_large" for labels "source",
// "reason"). A counter that lacks one of the labels has "" in its place.
func Counters(v *prometheus.CounterVec, labels ...string) map[string]uint64 {
	ch := make(chan prometheus.Metric)
	go func() { v.Collect(ch); close(ch) }()
	out := map[string]uint64{}
	key := make([]string, len(labels))
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		clear(key)
		for _, l := range d.GetLabel() {
			for i, name := range labels {
				if l.GetName() == name {
					key[i] = l.GetValue()
				}
			}
		}
		out[strings.Join(key, "/")] = uint64(d.GetCounter().GetValue())
	}
	return out
}

// Observations returns how many observations h has taken.
func Observations(h prometheus.Histogram) uint64 {
	var d dto.Metric
	if h.Write(&d) != nil {
		return 0
	}
	return d.GetHistogram().GetSampleCount()
}
