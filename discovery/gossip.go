package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// Topic is the gossipsub topic that carries capability adverts.
const Topic = "/kith/capabilities/1"

// maxGossipMessage caps one pubsub RPC: an advert plus room for the pubsub
// envelope (author, sequence number, signature, topic). It is below
// gossipsub's 1 MiB default, so keeping the default protocol IDs is safe:
// no peer sends us more than it would send anyone.
const maxGossipMessage = protocol.MaxAdvertSize + 4<<10

// Reasons an advert is dropped, as counted under "gossip/<reason>".
const (
	AdvertOversized  = "oversized"       // above protocol.MaxAdvertSize
	AdvertMalformed  = "malformed"       // does not decode
	AdvertForged     = "forged"          // signature is not the author's
	AdvertMismatched = "mismatched_peer" // about a peer other than its author
	AdvertExpired    = "expired"         // past its expiry
	AdvertDenied     = "denied"          // author or forwarding peer denied
	AdvertStale      = "stale"           // older than one already seen from its author
)

// ErrBadAdvert: an advert failed validation. The error also wraps the
// cause (protocol.ErrMalformed, protocol.ErrExpired,
// protocol.ErrPeerMismatch, crypto.ErrBadSignature, ...).
var ErrBadAdvert = errors.New("discovery: bad advert")

// advertError says which rule refused an advert.
type advertError struct {
	reason string // one of the Advert* reasons
	err    error
}

func (e *advertError) Error() string {
	return fmt.Sprintf("%v (%s): %v", ErrBadAdvert, e.reason, e.err)
}

func (e *advertError) Unwrap() []error { return []error{ErrBadAdvert, e.err} }

// AdvertReason returns the Advert* reason of an error from the gossip
// validation, or "" if err is not one.
func AdvertReason(err error) string {
	if ae, ok := errors.AsType[*advertError](err); ok {
		return ae.reason
	}
	return ""
}

// Advert is a verified capability advert.
type Advert struct {
	From      peer.ID                      // the author; Assertion.Provider is the same peer
	Assertion protocol.CapabilityAssertion // decoded from Signed
	Signed    crypto.Assertion             // the exact bytes the author signed
	Received  time.Time                    // when it was verified
}

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
	// subscription, so it is sent no adverts either. (A peer denied after
	// it subscribed stays subscribed until it reconnects, and a peer
	// allowed again rejoins when it reconnects.) Nil allows everyone.
	Allowed func(peer.ID) bool
	// Now is the clock adverts are checked against; nil means time.Now.
	Now func() time.Time
	// OnAdvert is called, from one goroutine and in order, with every
	// verified advert that was issued later than the last one from its
	// author; never with the local node's own. It must not block for long.
	OnAdvert func(Advert)
}

// Gossip publishes this node's capability adverts on Topic and keeps the
// freshest verified advert of every other node.
//
// Adverts are checked in a topic validator, so a bad one is never
// forwarded: it must fit protocol.MaxAdvertSize, decode, carry a signature
// by its libp2p author (gossipsub's strict signing binds the author to the
// message), be about that author, be unexpired, come from and through
// allowed peers, and be no older than the last one seen from its author.
type Gossip struct {
	h        host.Host
	log      *slog.Logger
	counters *Counters
	allowed  func(peer.ID) bool
	now      func() time.Time
	onAdvert func(Advert)

	router *pubsub.GossipSubRouter
	topic  *pubsub.Topic
	sub    *pubsub.Subscription
	cancel context.CancelFunc
	done   chan struct{}

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	latest  map[peer.ID]Advert
	pruneAt int // prune expired adverts when latest grows past this
}

// minPruneAt is the smallest size of the advert table that triggers a
// sweep of expired adverts.
const minPruneAt = 256

// NewGossip starts gossipsub on h, joins Topic and listens for adverts
// until Close (or until ctx ends).
func NewGossip(ctx context.Context, h host.Host, cfg GossipConfig) (*Gossip, error) {
	g := &Gossip{
		h:        h,
		log:      cfg.Logger,
		counters: cfg.Counters,
		allowed:  cfg.Allowed,
		now:      cfg.Now,
		onAdvert: cfg.OnAdvert,
		done:     make(chan struct{}),
		latest:   map[peer.ID]Advert{},
		pruneAt:  minPruneAt,
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

	ctx, g.cancel = context.WithCancel(ctx)
	fail := func(err error) (*Gossip, error) {
		g.cancel()
		g.removeHandlers()
		return nil, fmt.Errorf("discovery: start gossip: %w", err)
	}
	g.router = pubsub.DefaultGossipSubRouter(h)
	ps, err := pubsub.NewGossipSubWithRouter(ctx, h, g.router,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMaxMessageSize(maxGossipMessage),
		// Denied peers get no mesh links and no gossip (peer filter), and
		// their subscriptions are not recorded, so that flood publishing
		// skips them too. A peer allowed again takes part once it
		// reconnects and announces its subscription anew.
		pubsub.WithPeerFilter(func(p peer.ID, _ string) bool { return g.allowed(p) }),
		pubsub.WithSubscriptionFilter(subscriptionFilter{g.allowed}),
		// Send our own adverts to every peer on the topic, not only to the
		// mesh: the mesh is empty until a heartbeat grafts it, and adverts
		// right after start or after a new peer connects would go nowhere.
		// Each node publishes one small advert an interval, so the extra
		// copies cost little; relaying still goes through the mesh.
		pubsub.WithFloodPublish(true),
	)
	if err != nil {
		return fail(err)
	}
	if err := ps.RegisterTopicValidator(Topic, g.validate); err != nil {
		return fail(err)
	}
	if g.topic, err = ps.Join(Topic); err != nil {
		return fail(err)
	}
	if g.sub, err = g.topic.Subscribe(); err != nil {
		return fail(err)
	}
	go g.receive(ctx)
	return g, nil
}

// Close leaves the topic and stops gossipsub.
func (g *Gossip) Close() error {
	g.closeOnce.Do(func() {
		g.sub.Cancel()
		if err := g.topic.Close(); err != nil {
			g.closeErr = fmt.Errorf("discovery: close gossip: %w", err)
		}
		g.cancel()
		<-g.done
		g.removeHandlers()
	})
	return g.closeErr
}

// subscriptionFilter records the subscriptions of allowed peers to Topic,
// and nothing else: no other topic, and no peer that is denied.
type subscriptionFilter struct{ allowed func(peer.ID) bool }

func (subscriptionFilter) CanSubscribe(topic string) bool { return topic == Topic }

func (f subscriptionFilter) FilterIncomingSubscriptions(from peer.ID, subs []*pb.RPC_SubOpts) ([]*pb.RPC_SubOpts, error) {
	// An error would drop the whole RPC, messages included, before the
	// validator could count them; an empty list drops only the
	// subscriptions.
	if !f.allowed(from) {
		return nil, nil
	}
	return pubsub.FilterSubscriptions(subs, func(t string) bool { return t == Topic }), nil
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
// node's identity (protocol.SignCapability). The node publishes every
// interval and whenever its load changes. An assertion that would not pass
// its peers' validation is refused with an error wrapping ErrBadAdvert.
func (g *Gossip) Publish(ctx context.Context, a crypto.Assertion) error {
	data, err := protocol.EncodeAdvert(a)
	if err != nil {
		return fmt.Errorf("discovery: publish advert: %w", &advertError{reason: AdvertMalformed, err: err})
	}
	if _, err := verifyAdvert(g.h.ID(), data, g.now()); err != nil {
		return fmt.Errorf("discovery: publish advert: %w", err)
	}
	if err := g.topic.Publish(ctx, data); err != nil {
		return fmt.Errorf("discovery: publish advert: %w", err)
	}
	return nil
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
	g.mu.Lock()
	last, seen := g.latest[author]
	g.mu.Unlock()
	if seen && adv.Assertion.IssuedAt.Before(last.Assertion.IssuedAt) {
		g.drop(AdvertStale, from, author, nil)
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = adv
	return pubsub.ValidationAccept
}

// receive takes delivered adverts until the subscription ends.
func (g *Gossip) receive(ctx context.Context) {
	defer close(g.done)
	for {
		msg, err := g.sub.Next(ctx)
		if err != nil {
			return
		}
		adv, ok := msg.ValidatorData.(Advert)
		if !ok || msg.GetFrom() == g.h.ID() {
			continue
		}
		g.accept(adv, msg.ReceivedFrom)
	}
}

// accept records adv if it is the freshest from its author. The validator
// checked this too, but two adverts can pass it before either is recorded.
func (g *Gossip) accept(adv Advert, from peer.ID) {
	g.mu.Lock()
	last, seen := g.latest[adv.From]
	switch {
	case seen && adv.Assertion.IssuedAt.Before(last.Assertion.IssuedAt):
		g.mu.Unlock()
		g.drop(AdvertStale, from, adv.From, nil)
		return
	case seen && adv.Assertion.IssuedAt.Equal(last.Assertion.IssuedAt):
		// The same assertion published again: it is still current.
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

// pruneLocked forgets expired adverts, so the table holds only live
// peers.
func (g *Gossip) pruneLocked(now time.Time) {
	maps.DeleteFunc(g.latest, func(_ peer.ID, a Advert) bool { return !now.Before(a.Assertion.ExpiresAt) })
	g.pruneAt = max(minPruneAt, 2*len(g.latest))
}

func (g *Gossip) drop(reason string, from, author peer.ID, err error) {
	args := []any{"peer", from, "author", author}
	if err != nil {
		args = append(args, "error", err)
	}
	g.counters.Drop(g.log, SourceGossip, reason, args...)
}

// verifyAdvert checks data, an advert published by author, at now: the
// whole of the validation that needs no state. It never panics, whatever
// data holds. An error wraps ErrBadAdvert and names one of the Advert*
// reasons (AdvertReason).
func verifyAdvert(author peer.ID, data []byte, now time.Time) (Advert, error) {
	bad := func(reason string, err error) (Advert, error) {
		return Advert{}, &advertError{reason: reason, err: err}
	}
	if len(data) > protocol.MaxAdvertSize {
		return bad(AdvertOversized, fmt.Errorf("%w: %d bytes, cap %d", protocol.ErrFrameTooLarge, len(data), protocol.MaxAdvertSize))
	}
	if err := author.Validate(); err != nil {
		return bad(AdvertMalformed, fmt.Errorf("author: %w", err))
	}
	signed, err := protocol.DecodeAdvert(data)
	if err != nil {
		return bad(AdvertMalformed, err)
	}
	c, err := protocol.VerifyCapability(author, signed, now)
	switch {
	case err == nil:
		return Advert{From: author, Assertion: c, Signed: signed, Received: now}, nil
	case errors.Is(err, protocol.ErrExpired):
		return bad(AdvertExpired, err)
	case errors.Is(err, protocol.ErrPeerMismatch):
		return bad(AdvertMismatched, err)
	case errors.Is(err, crypto.ErrBadSignature), errors.Is(err, crypto.ErrNotEd25519):
		// Not the author's signature. An advert that someone else signed
		// about themselves and the author passes on as its own is a
		// mismatch, not a forgery: tell the two apart for the counters.
		if other, derr := protocol.DecodeCapabilityAssertion(signed.Payload); derr == nil && other.Provider != author {
			return bad(AdvertMismatched, fmt.Errorf("%w: assertion about %s published by %s", protocol.ErrPeerMismatch, other.Provider, author))
		}
		return bad(AdvertForged, err)
	default:
		return bad(AdvertMalformed, err)
	}
}

// TopicPeers is how many peers this node knows to be on the adverts topic.
func (g *Gossip) TopicPeers() int { return len(g.topic.ListPeers()) }
