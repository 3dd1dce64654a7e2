package delegation

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// metrics are the engine's Prometheus series. Every label value comes
// from a fixed set (sides, states, typed reasons) or from a profile name
// this node chose; never a peer or delegation ID, never text a peer sent.
type metrics struct {
	started       *prometheus.CounterVec
	ended         *prometheus.CounterVec
	offerRejects  *prometheus.CounterVec
	inboundFails  *prometheus.CounterVec
	capRejects    *prometheus.CounterVec
	rateLimited   *prometheus.CounterVec
	poolRefusals  *prometheus.CounterVec
	preempted     prometheus.Counter
	roundTrip     *prometheus.HistogramVec
	slotsInUse    prometheus.GaugeFunc
	slotsCapacity prometheus.GaugeFunc

	// streamsRefused counts new delegation streams refused as over a
	// stream limit (streamgate.go), by where: local or remote.
	streamsRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, e *Engine) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kith", Name: name, Help: help}, labels)
	}
	m := &metrics{
		started: counter("delegations_started_total",
			"Delegations started, by side (requester, provider) and profile.", "side", "profile"),
		ended: counter("delegations_ended_total",
			"Delegations that reached a terminal state, by side, profile, state and typed reason (none when there is none).",
			"side", "profile", "state", "reason"),
		offerRejects: counter("offers_rejected_total",
			"Delegation offers this node refused as provider, by typed reason.", "reason"),
		inboundFails: counter("inbound_streams_refused_total",
			"Inbound delegation streams refused before any message was handled: envelope and frame failures, by reason.", "reason"),
		capRejects: counter("capability_rejections_total",
			"Capability assertions (query answers and adverts) refused, by reason.", "reason"),
		rateLimited: counter("rate_limited_total",
			"Requests refused by a per-peer rate limit, by what was limited (stream, offer, query).", "kind"),
		poolRefusals: counter("remote_pool_refusals_total",
			"Offers refused because the remote pool was full, by rule (pool_full, peer_share, untrusted_share).", "rule"),
		streamsRefused: counter("delegation_streams_refused_total",
			"New delegation streams refused as over a stream limit, this node's (local) or the provider's (remote); the offer waits for one of this node's streams to that provider to close, then goes again.", "where"),
		preempted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "kith", Name: "vram_preempted_total",
			Help: "Remote delegations preempted because local work needed their VRAM."}),
		roundTrip: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "kith", Name: "delegation_round_trip_seconds",
			Help:    "Time from offer to terminal state of the delegations this node requested, by whether a peer ran it.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10)}, []string{"remote"}),
		slotsInUse: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kith", Name: "remote_pool_slots_in_use",
			Help: "Remote pool slots held by peers' delegations."}, func() float64 { return float64(len(e.slots)) }),
		slotsCapacity: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kith", Name: "remote_pool_slots",
			Help: "Size of the remote pool."}, func() float64 { return float64(cap(e.slots)) }),
	}
	if reg != nil {
		reg.MustRegister(m.started, m.ended, m.offerRejects, m.inboundFails, m.capRejects, m.rateLimited,
			m.poolRefusals, m.streamsRefused, m.preempted, m.roundTrip, m.slotsInUse, m.slotsCapacity)
	}
	return m
}

func side(r store.Role) string {
	if r == store.RoleProvider {
		return "provider"
	}
	return "requester"
}

// reasonLabel is the typed part of a delegation's reason ("busy: all 4
// remote slots in use" → "busy"), or "other" when the text before ':' is
// not a known reason: reasons may quote what a peer sent.
func reasonLabel(reason string) string {
	if reason == "" {
		return "none"
	}
	head, _, _ := strings.Cut(reason, ":")
	head = strings.TrimSpace(head)
	var r protocol.RejectReason
	if r.UnmarshalText([]byte(head)) == nil {
		return r.String()
	}
	if _, ok := failureReasons[head]; ok {
		return head
	}
	return "other"
}

// failureReasons are the engine's own typed failure reasons (errors.go).
var failureReasons = map[string]struct{}{
	ReasonProviderRestarted: {}, ReasonProviderShutdown: {}, ReasonRequesterRestarted: {},
	ReasonBudgetViolation: {}, ReasonProofInvalid: {}, ReasonTimeout: {}, ReasonUnreachable: {},
	ReasonProtocolViolation: {}, ReasonOutputViolation: {}, ReasonPayloadTooLarge: {},
	ReasonStore: {}, ReasonExecutor: {}, ReasonInputUnsupported: {}, ReasonAnswerRefused: {},
}

// started counts a delegation just created, and its end when it was
// created terminal (refused before it ran).
func (m *metrics) create(d store.Delegation, now time.Time) {
	m.started.WithLabelValues(side(d.Role), d.Profile).Inc()
	m.end(d, now)
}

// end counts d if it is terminal.
func (m *metrics) end(d store.Delegation, now time.Time) {
	if !d.State.Terminal() {
		return
	}
	m.ended.WithLabelValues(side(d.Role), d.Profile, d.State.String(), reasonLabel(d.Reason)).Inc()
	if d.Role == store.RoleRequester && !d.CreatedAt.IsZero() {
		remote := "false"
		if d.Remote {
			remote = "true"
		}
		m.roundTrip.WithLabelValues(remote).Observe(now.Sub(d.CreatedAt).Seconds())
	}
	if d.Role == store.RoleProvider && d.State == protocol.StatePreempted {
		m.preempted.Inc()
	}
}

// inboundFailure names why protocol.Accept refused a stream.
func inboundFailure(err error) string {
	switch {
	case errors.Is(err, crypto.ErrReplayed):
		return "replayed"
	case errors.Is(err, crypto.ErrReplayCacheFull):
		return "replay_cache_full"
	case errors.Is(err, crypto.ErrExpired), errors.Is(err, crypto.ErrLifetimeTooLong):
		return "expired"
	case errors.Is(err, crypto.ErrFromFuture):
		return "from_future"
	case errors.Is(err, crypto.ErrWrongRecipient):
		return "wrong_recipient"
	case errors.Is(err, crypto.ErrSenderMismatch):
		return "sender_mismatch"
	case errors.Is(err, crypto.ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, crypto.ErrTampered), errors.Is(err, crypto.ErrOutOfOrder), errors.Is(err, crypto.ErrFrameTooShort):
		return "tampered"
	case errors.Is(err, crypto.ErrBadVersion), errors.Is(err, protocol.ErrVersionUnsupported):
		return "version"
	case errors.Is(err, protocol.ErrFrameTooLarge), errors.Is(err, protocol.ErrPayloadTooLarge):
		return "too_large"
	case errors.Is(err, crypto.ErrMalformedHeader), errors.Is(err, protocol.ErrMalformed),
		errors.Is(err, protocol.ErrTypeMismatch), errors.Is(err, protocol.ErrUnknownEnum), errors.Is(err, protocol.ErrBadID):
		return "malformed"
	}
	return "io"
}
