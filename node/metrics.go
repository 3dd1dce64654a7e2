package node

import (
	"net/http"
	"strings"
	"time"

	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/store"
)

// MetricsPath is where the [api] listener serves Prometheus metrics.
const MetricsPath = "/metrics"

// nodeMetrics is one node's Prometheus registry and the series the node
// package owns. Each node has its own registry, never the global one:
// tests run many nodes in one process. Series that describe state (the
// connections, VRAM, relay reservations) are read when scraped; the
// counters count as things happen.
type nodeMetrics struct {
	reg       *prometheus.Registry
	store     *store.Metrics
	discovery *discovery.Counters

	holePunches   *prometheus.CounterVec
	peersRefused  *prometheus.CounterVec
	relayCircuits prometheus.Gauge
	relayReserves prometheus.Gauge
	relayRequests *prometheus.CounterVec
}

func newNodeMetrics(n *Node) *nodeMetrics {
	reg := prometheus.NewRegistry()
	m := &nodeMetrics{
		reg:       reg,
		store:     store.NewMetrics(reg),
		discovery: discovery.NewCounters(reg),
		holePunches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kith", Name: "holepunch_attempts_total",
			Help: "Attempts at a direct connection to a peer behind NAT, by step (direct_dial, hole_punch, exchange) and outcome (success, failure)."},
			[]string{"step", "outcome"}),
		peersRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kith", Name: "peers_refused_total",
			Help: "Inbound connections and relay reservations refused because the allow/deny lists do not admit the peer, by what was refused."},
			[]string{"what"}),
		relayCircuits: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kith", Subsystem: "relay_service", Name: "circuits",
			Help: "Circuits this node relays now (relay = true)."}),
		relayReserves: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "kith", Subsystem: "relay_service", Name: "reservations",
			Help: "Reservations this node's relay service holds now (relay = true)."}),
		relayRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kith", Subsystem: "relay_service", Name: "requests_total",
			Help: "Reservation and circuit requests the relay service answered, by kind and status."}, []string{"kind", "status"}),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "kith"}),
		m.holePunches, m.peersRefused, m.relayCircuits, m.relayReserves, m.relayRequests,
		stateCollector{n},
	)
	return m
}

// handler serves the registry in the exposition format.
func (m *nodeMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

func (m *nodeMetrics) punch(step string, success bool) {
	outcome := "failure"
	if success {
		outcome = "success"
	}
	m.holePunches.WithLabelValues(step, outcome).Inc()
}

// stateCollector reads the node's state when scraped.
type stateCollector struct{ n *Node }

var (
	connsDesc = prometheus.NewDesc("kith_connections", "Open libp2p connections, by path (direct, relayed) and transport.",
		[]string{"path", "transport"}, nil)
	relayResDesc = prometheus.NewDesc("kith_relay_reservations", "Relays that hold a reservation for this node (its circuit addresses).", nil, nil)
	vramLeased   = prometheus.NewDesc("kith_vram_leased_bytes", "VRAM leased to delegations, by whether the work is local or remote.",
		[]string{"origin"}, nil)
	vramFree = prometheus.NewDesc("kith_vram_available_bytes", "VRAM a new lease could get without preemption, over every device.", nil, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connsDesc
	ch <- relayResDesc
	ch <- vramLeased
	ch <- vramFree
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	h, ledger := n.host, n.ledger
	n.mu.Unlock()
	if h != nil {
		type key struct{ path, transport string }
		counts := map[key]int{}
		for _, conn := range h.Network().Conns() {
			k := key{"direct", transportOf(conn.RemoteMultiaddr())}
			if isRelayed(conn) {
				k.path = "relayed"
			}
			counts[k]++
		}
		for k, v := range counts {
			ch <- prometheus.MustNewConstMetric(connsDesc, prometheus.GaugeValue, float64(v), k.path, k.transport)
		}
		relays := map[string]bool{}
		for _, a := range n.nat.snapshot().relayAddrs {
			if id, err := a.ValueForProtocol(ma.P_P2P); err == nil {
				relays[id] = true
			}
		}
		ch <- prometheus.MustNewConstMetric(relayResDesc, prometheus.GaugeValue, float64(len(relays)))
	}
	if ledger != nil {
		var local, remote uint64
		for _, l := range ledger.Leases() {
			if l.Local {
				local += l.VRAMMiB
			} else {
				remote += l.VRAMMiB
			}
		}
		var avail uint64
		for _, d := range ledger.Room() {
			avail += d.AvailableMiB
		}
		ch <- prometheus.MustNewConstMetric(vramLeased, prometheus.GaugeValue, float64(local<<20), "local")
		ch <- prometheus.MustNewConstMetric(vramLeased, prometheus.GaugeValue, float64(remote<<20), "remote")
		ch <- prometheus.MustNewConstMetric(vramFree, prometheus.GaugeValue, float64(avail<<20))
	}
}

// transportOf names a connection's transport from its remote address:
// the bounded set kith listens on.
func transportOf(a ma.Multiaddr) string {
	for _, p := range []struct {
		code int
		name string
	}{{ma.P_WEBTRANSPORT, "webtransport"}, {ma.P_QUIC_V1, "quic"}, {ma.P_TCP, "tcp"}} {
		if _, err := a.ValueForProtocol(p.code); err == nil {
			return p.name
		}
	}
	return "other"
}

// relayTracer hears the relay service (relay = true).
type relayTracer struct{ m *nodeMetrics }

var _ relayv2.MetricsTracer = relayTracer{}

func (t relayTracer) RelayStatus(bool)               {}
func (t relayTracer) ConnectionOpened()              { t.m.relayCircuits.Inc() }
func (t relayTracer) ConnectionClosed(time.Duration) { t.m.relayCircuits.Dec() }
func (t relayTracer) BytesTransferred(int)           {}
func (t relayTracer) ReservationClosed(cnt int)      { t.m.relayReserves.Sub(float64(cnt)) }
func (t relayTracer) ConnectionRequestHandled(s pbv2.Status) {
	t.m.relayRequests.WithLabelValues("circuit", statusLabel(s)).Inc()
}
func (t relayTracer) ReservationRequestHandled(s pbv2.Status) {
	t.m.relayRequests.WithLabelValues("reservation", statusLabel(s)).Inc()
}
func (t relayTracer) ReservationAllowed(renewal bool) {
	if !renewal {
		t.m.relayReserves.Inc()
	}
}

func statusLabel(s pbv2.Status) string {
	if name, ok := pbv2.Status_name[int32(s)]; ok {
		return strings.ToLower(name)
	}
	return "other"
}
