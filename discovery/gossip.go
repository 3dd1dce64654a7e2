package discovery

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// GossipConfig configures capability advert gossip.
type GossipConfig struct {
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Counters counts dropped adverts under "gossip/<reason>"; nil keeps a
	// private set.
	Counters *Counters
	// Allowed reports whether a peer may take part; it is asked on every
	// message, so a trust change applies at once. Adverts authored or
	// forwarded by a peer it refuses are dropped and counted; gossipsub
	// neither meshes nor gossips with such a peer and ignores its
	// subscriptions, so it is sent no adverts either. (A peer denied after
	// it subscribed stays subscribed until it reconnects, and a peer
	// allowed again rejoins when it reconnects.) Nil allows everyone.
	Allowed func(peer.ID) bool
	// Now is the clock adverts are checked against; nil means time.Now.
	Now func() time.Time
	// OnAdvert is called, one call at a time, with every verified advert
	// that was issued later than the last one from its author; never with
	// the local node's own. It must not block for long.
	OnAdvert func(Advert)

	// Legacy runs the design of kith before per-profile topics: one topic
	// (Topic) for every advert, flood publishing, gossipsub's default
	// parameters. The scale harness compares it with the new design; a
	// node never sets it.
	Legacy bool
	// LegacyTopic also listens on Topic, and publishes this node's full
	// adverts (never load updates) there, for nodes of earlier versions.
	LegacyTopic bool
	// MinGap is the least time between two adverts of one author that
	// this node takes: a newer advert issued sooner is dropped as
	// too_soon and not forwarded, so no node can flood a topic. Zero
	// means DefaultMinGap. Publishers keep their load updates further
	// apart than this (AdvertPolicy.LoadInterval).
	MinGap time.Duration
	// WantFor is how long a profile this node requested (Want) keeps its
	// topic joined after the last request. Zero means DefaultWantFor.
	WantFor time.Duration
	// Heartbeat is gossipsub's heartbeat. Zero means one second; the
	// scale harness shortens it together with every interval to run the
	// design in scaled time. gossipsub's other timers scale with it.
	Heartbeat time.Duration
	// Tracer, if set, sees every RPC gossipsub sends and receives (the
	// scale harness counts bytes and messages with it).
	Tracer pubsub.RawTracer
	// FindPeers, if set, names up to limit peers on the topic of profile:
	// the node's DHT lookup of the profile's providers. gossipsub routes
	// only through peers on a topic, and a node's connections (the
	// introductions, the DHT's) may hold too few of a small topic's
	// peers: while a joined topic has fewer than the mesh's low mark, Run
	// connects to those FindPeers names (see rendezvous).
	FindPeers func(ctx context.Context, profile string, limit int) []peer.AddrInfo

	// Tests only: gossipsub's protocol ID, when not the default. The scale
	// harness runs its phases one after another on the same hosts, each
	// with its own ID, as two versions of gossipsub on one host would.
	protocolID p2pprotocol.ID
}

// Defaults of GossipConfig.
const (
	DefaultMinGap  = time.Second
	DefaultWantFor = 30 * time.Minute
)

// Gossip publishes this node's capability adverts and keeps the freshest
// verified advert of every other node it hears.
//
// Adverts travel on one topic per profile (ProfileTopic): a provider
// publishes on the topics of the profiles its advert lists, and a node
// subscribes to the topics of the profiles it serves (Serve) and of those
// it requests (Want), so what it hears grows with what it uses, not with
// the size of the mesh. Adverts are checked in a topic validator, so a bad
// one is never forwarded: it must fit protocol.MaxAdvertSize, decode,
// carry a signature by its libp2p author (gossipsub's strict signing binds
// the author to the message), be about that author, be unexpired, list the
// profile of the topic it came on, come from and through allowed peers,
// be no older than the last one seen from its author, and come no sooner
// than MinGap after it.
type Gossip struct {
	h         host.Host
	log       *slog.Logger
	counters  *Counters
	allowed   func(peer.ID) bool
	now       func() time.Time
	onAdvert  func(Advert)
	legacy    bool
	onLegacy  bool // listens and publishes on Topic
	findPeers func(ctx context.Context, profile string, limit int) []peer.AddrInfo
	minGap    time.Duration
	wantFor   time.Duration

	ps     *pubsub.PubSub
	router *pubsub.GossipSubRouter
	ctx    context.Context // NewGossip's, for the receive loops
	cancel context.CancelFunc
	filter *subscriptionFilter

	closeOnce sync.Once
	closeErr  error

	tmu    sync.Mutex
	topics map[string]*joined // by topic name
	closed bool

	deliver sync.Mutex // one OnAdvert call at a time

	mu      sync.Mutex
	latest  map[peer.ID]Advert
	authors map[string]map[peer.ID]time.Time // topic → author → expiry of its advert
	pruneAt int                              // prune expired adverts when latest grows past this
}

// joined is one topic this node subscribes to, and why.
type joined struct {
	profile   string // "" for Topic
	topic     *pubsub.Topic
	sub       *pubsub.Subscription
	done      chan struct{}
	serve     bool      // a profile this node offers
	wantUntil time.Time // a profile this node requested, until then
	lastFind  time.Time // last rendezvous
}

// minPruneAt is the smallest size of the advert table that triggers a
// sweep of expired adverts.
const minPruneAt = 256

// NewGossip starts gossipsub on h and listens for adverts until Close (or
// until ctx ends). In the legacy design, or with LegacyTopic, it joins
// Topic at once; per-profile topics are joined by Serve and Want.
func NewGossip(ctx context.Context, h host.Host, cfg GossipConfig) (*Gossip, error) {
	g := &Gossip{
		h:         h,
		log:       cfg.Logger,
		counters:  cfg.Counters,
		allowed:   cfg.Allowed,
		now:       cfg.Now,
		onAdvert:  cfg.OnAdvert,
		legacy:    cfg.Legacy,
		onLegacy:  cfg.Legacy || cfg.LegacyTopic,
		findPeers: cfg.FindPeers,
		minGap:    cmp.Or(cfg.MinGap, DefaultMinGap),
		wantFor:   cmp.Or(cfg.WantFor, DefaultWantFor),
		topics:    map[string]*joined{},
		latest:    map[peer.ID]Advert{},
		authors:   map[string]map[peer.ID]time.Time{},
		pruneAt:   minPruneAt,
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("component", "gossip")
	if g.counters == nil {
		g.counters = &Counters{}
	}
	if g.allowed == nil {
		g.allowed = func(peer.ID) bool { return true }
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.onAdvert == nil {
		g.onAdvert = func(Advert) {}
	}

	g.ctx, g.cancel = context.WithCancel(ctx)
	fail := func(err error) (*Gossip, error) {
		g.cancel()
		g.filter.stop()
		g.removeHandlers()
		return nil, fmt.Errorf("discovery: start gossip: %w", err)
	}
	g.filter = newSubscriptionFilter(h, g.allowed)
	g.router = pubsub.DefaultGossipSubRouter(h)
	opts := []pubsub.Option{
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMaxMessageSize(maxGossipMessage),
		// Denied peers get no mesh links and no gossip (peer filter), and
		// their subscriptions are not recorded, so that flood publishing
		// skips them too. A peer allowed again takes part once it
		// reconnects and announces its subscriptions anew.
		pubsub.WithPeerFilter(func(p peer.ID, _ string) bool { return g.allowed(p) }),
		pubsub.WithSubscriptionFilter(g.filter),
		pubsub.WithGossipSubParams(gossipParams(cfg.Legacy, cfg.Heartbeat)),
		// Legacy: send our own adverts to every peer on the topic, not only
		// to the mesh, which is empty until a heartbeat grafts it. With
		// every node on one topic that is a copy to nearly every
		// connection; the per-profile topics publish to the mesh alone and
		// repeat an advert once new peers have been grafted (AdvertPolicy).
		pubsub.WithFloodPublish(cfg.Legacy),
	}
	if cfg.Tracer != nil {
		opts = append(opts, pubsub.WithRawTracer(cfg.Tracer))
	}
	if cfg.protocolID != "" {
		opts = append(opts, pubsub.WithGossipSubProtocols([]p2pprotocol.ID{cfg.protocolID},
			func(pubsub.GossipSubFeature, p2pprotocol.ID) bool { return true }))
	}
	ps, err := pubsub.NewGossipSubWithRouter(g.ctx, h, g.router, opts...)
	if err != nil {
		return fail(err)
	}
	g.ps = ps
	if g.onLegacy {
		if err := g.join(Topic, "", func(j *joined) { j.serve = true }); err != nil {
			return fail(err)
		}
	}
	return g, nil
}

// Close leaves every topic and stops gossipsub.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		g.tmu.Lock()
		g.closed = true
		var errs []error
		for name, j := range g.topics {
			errs = append(errs, g.leaveLocked(name, j))
		}
		g.tmu.Unlock()
		if err := errors.Join(errs...); err != nil {
			g.closeErr = fmt.Errorf("discovery: close gossip: %w", err)
		}
		g.cancel()
		g.filter.stop()
		g.removeHandlers()
	})
	return g.closeErr
}

// removeHandlers unregisters gossipsub's stream handlers, which outlive
// the PubSub they belong to.
func (g *Gossip) removeHandlers() {
	if g.router == nil {
		return
	}
	for _, id := range g.router.Protocols() {
		g.h.RemoveStreamHandler(id)
	}
}

// Publish publishes a, a capability assertion the caller signed with this
// node's identity (protocol.SignCapability), on the topics of its profiles
// that push allows (nil: all of them) and, when full, on Topic if this
// node is on it. In the legacy design it goes on Topic alone. An assertion
// that would not pass its peers' validation is refused with an error
// wrapping ErrBadAdvert.
func (g *Gossip) Publish(ctx context.Context, a crypto.Assertion) error {
	return g.publish(ctx, a, true, nil)
}

func (g *Gossip) publish(ctx context.Context, a crypto.Assertion, full bool, push func(topic string) bool) error {
	data, err := protocol.EncodeAdvert(a)
	if err != nil {
		return fmt.Errorf("discovery: publish advert: %w", &advertError{reason: AdvertMalformed, err: err})
	}
	adv, err := verifyAdvert(g.h.ID(), data, g.now())
	if err != nil {
		return fmt.Errorf("discovery: publish advert: %w", err)
	}
	var names []string
	if g.onLegacy && (full || g.legacy) {
		names = append(names, Topic)
	}
	if !g.legacy {
		for _, p := range adv.Assertion.Profiles {
			if t := ProfileTopic(p.Name); push == nil || push(t) {
				names = append(names, t)
			}
		}
	}
	var errs []error
	for _, name := range names {
		g.tmu.Lock()
		j, ok := g.topics[name]
		g.tmu.Unlock()
		if !ok {
			continue // Serve has not joined it yet, or Close has left it
		}
		if err := j.topic.Publish(ctx, data); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("discovery: publish advert: %w", err)
	}
	if g.closedNow() {
		return fmt.Errorf("discovery: publish advert: %w", errGossipClosed)
	}
	return nil
}

func (g *Gossip) closedNow() bool {
	g.tmu.Lock()
	defer g.tmu.Unlock()
	return g.closed
}

// Latest returns the freshest verified advert from p, if it has not
// expired.
func (g *Gossip) Latest(p peer.ID) (Advert, bool) {
	g.mu.Lock()
	a, ok := g.latest[p]
	g.mu.Unlock()
	if !ok || !g.now().Before(a.Assertion.ExpiresAt) {
		return Advert{}, false
	}
	return a, true
}

// Adverts returns the freshest unexpired advert of every peer, ordered by
// peer ID: the candidates a requester chooses a provider from.
func (g *Gossip) Adverts() []Advert {
	now := g.now()
	g.mu.Lock()
	out := make([]Advert, 0, len(g.latest))
	for _, a := range g.latest {
		if now.Before(a.Assertion.ExpiresAt) {
			out = append(out, a)
		}
	}
	g.mu.Unlock()
	slices.SortFunc(out, func(a, b Advert) int { return cmpPeer(a.From, b.From) })
	return out
}

func cmpPeer(a, b peer.ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// validate is the topic validator. from is the peer that sent the message
// to us, msg.GetFrom() its author.
func (g *Gossip) validate(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	author := msg.GetFrom()
	if author == g.h.ID() {
		// Our own: Publish checked it. Relayed back to us, it is
		// nothing new.
		if from == author {
			return pubsub.ValidationAccept
		}
		return pubsub.ValidationIgnore
	}
	if !g.allowed(from) || !g.allowed(author) {
		g.drop(AdvertDenied, from, author, nil)
		return pubsub.ValidationIgnore
	}
	adv, err := verifyAdvert(author, msg.GetData(), g.now())
	if err != nil {
		reason := AdvertReason(err)
		g.drop(reason, from, author, err)
		if reason == AdvertExpired {
			// Perhaps only our clock is ahead: no fault of the sender.
			return pubsub.ValidationIgnore
		}
		return pubsub.ValidationReject
	}
	if t := msg.GetTopic(); t != Topic && !slices.ContainsFunc(adv.Assertion.Profiles, func(p protocol.Profile) bool { return ProfileTopic(p.Name) == t }) {
		// Only a provider of a profile may take the bandwidth of those
		// who use it.
		g.drop(AdvertOffTopic, from, author, nil)
		return pubsub.ValidationReject
	}
	g.mu.Lock()
	last, seen := g.latest[author]
	g.mu.Unlock()
	switch {
	case !seen:
	case adv.Assertion.IssuedAt.Before(last.Assertion.IssuedAt):
		g.drop(AdvertStale, from, author, nil)
		return pubsub.ValidationIgnore
	case !g.legacy && adv.Assertion.IssuedAt.After(last.Assertion.IssuedAt) && adv.Assertion.IssuedAt.Sub(last.Assertion.IssuedAt) < g.minGap:
		// Equal is the same advert on another of the author's topics,
		// which must be forwarded on that topic too.
		g.drop(AdvertTooSoon, from, author, nil)
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = adv
	return pubsub.ValidationAccept
}

// receive takes delivered adverts on one topic until its subscription
// ends.
func (g *Gossip) receive(name string, j *joined) {
	defer close(j.done)
	for {
		msg, err := j.sub.Next(g.ctx)
		if err != nil {
			return
		}
		adv, ok := msg.ValidatorData.(Advert)
		if !ok || msg.GetFrom() == g.h.ID() {
			continue
		}
		g.mu.Lock()
		on := g.authors[name]
		if on == nil {
			on = map[peer.ID]time.Time{}
			g.authors[name] = on
		}
		on[adv.From] = adv.Assertion.ExpiresAt
		g.mu.Unlock()
		g.accept(adv, msg.ReceivedFrom)
	}
}

// accept records adv if it is the freshest from its author. The validator
// checked this too, but two adverts can pass it before either is recorded.
func (g *Gossip) accept(adv Advert, from peer.ID) {
	g.deliver.Lock()
	defer g.deliver.Unlock()
	g.mu.Lock()
	last, seen := g.latest[adv.From]
	switch {
	case seen && adv.Assertion.IssuedAt.Before(last.Assertion.IssuedAt):
		g.mu.Unlock()
		g.drop(AdvertStale, from, adv.From, nil)
		return
	case seen && adv.Assertion.IssuedAt.Equal(last.Assertion.IssuedAt):
		// The same assertion published again, or on another topic: it is
		// still current.
		last.Received = adv.Received
		g.latest[adv.From] = last
		g.mu.Unlock()
		return
	}
	g.latest[adv.From] = adv
	if len(g.latest) > g.pruneAt {
		g.pruneLocked(g.now())
	}
	g.mu.Unlock()
	g.onAdvert(adv)
}

// pruneLocked forgets expired adverts, so the tables hold only live
// peers.
func (g *Gossip) pruneLocked(now time.Time) {
	maps.DeleteFunc(g.latest, func(_ peer.ID, a Advert) bool { return !now.Before(a.Assertion.ExpiresAt) })
	for _, on := range g.authors {
		maps.DeleteFunc(on, func(_ peer.ID, exp time.Time) bool { return !now.Before(exp) })
	}
	g.pruneAt = max(minPruneAt, 2*len(g.latest))
}

// pushing reports whether this node is one of the first max providers on
// topic, ranked by the hash of peer ID and topic, among the live authors
// it has heard there. Only those push their adverts on a topic: past max
// providers, requesters pull the load of a few providers the DHT names
// (docs/scale.md). Ranking by a hash spreads the pushers evenly and keeps
// them the same from one round to the next; when one leaves, its advert
// expires and the next in rank starts pushing.
func (g *Gossip) pushing(topic string, max int) bool {
	if max <= 0 || topic == Topic {
		return true
	}
	self := pushRank(g.h.ID(), topic)
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	ahead := 0
	for p, exp := range g.authors[topic] {
		if now.Before(exp) && bytes.Compare(pushRank(p, topic), self) < 0 {
			ahead++
		}
	}
	return ahead < max
}

func pushRank(p peer.ID, topic string) []byte {
	sum := sha256.Sum256([]byte(string(p) + topic))
	return sum[:]
}

// ProvidersOn is how many live providers this node has heard on the topic
// of profile.
func (g *Gossip) ProvidersOn(profile string) int {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, exp := range g.authors[ProfileTopic(profile)] {
		if now.Before(exp) {
			n++
		}
	}
	return n
}

func (g *Gossip) drop(reason string, from, author peer.ID, err error) {
	args := []any{"peer", from, "author", author}
	if err != nil {
		args = append(args, "error", err)
	}
	g.counters.Drop(g.log, SourceGossip, reason, args...)
}
