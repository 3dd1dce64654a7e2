package promread

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestCounters(t *testing.T) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_total", Help: "t"}, []string{"source", "reason"})
	if got := Counters(v, "source", "reason"); len(got) != 0 {
		t.Fatalf("empty vector: %v", got)
	}
	v.WithLabelValues("dht", "too_large").Add(3)
	v.WithLabelValues("mdns", "malformed").Inc()
	want := map[string]uint64{"dht/too_large": 3, "mdns/malformed": 1}
	if got := Counters(v, "source", "reason"); !maps.Equal(got, want) {
		t.Errorf("Counters(source, reason) = %v, want %v", got, want)
	}
	// The key follows the order asked for, not the vector's.
	want = map[string]uint64{"too_large/dht": 3, "malformed/mdns": 1}
	if got := Counters(v, "reason", "source"); !maps.Equal(got, want) {
		t.Errorf("Counters(reason, source) = %v, want %v", got, want)
	}
	one := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "u_total", Help: "u"}, []string{"how"})
	one.WithLabelValues("staged").Add(4)
	if got := Counters(one, "how"); !maps.Equal(got, map[string]uint64{"staged": 4}) {
		t.Errorf("one label: %v", got)
	}
}

func TestObservations(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "t_seconds", Help: "t"})
	if got := Observations(h); got != 0 {
		t.Fatalf("empty histogram: %d", got)
	}
	for _, v := range []float64{0.001, 2, 0} {
		h.Observe(v)
	}
	if got := Observations(h); got != 3 {
		t.Errorf("Observations = %d, want 3", got)
	}
}
