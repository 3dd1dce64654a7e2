package delegation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Stream is one libp2p stream (or a test double with the same shape).
type Stream interface {
	protocol.Stream
	Close() error
	Reset() error
}

// Dialer opens delegation streams to peers; the node implements it with its
// libp2p host and the /kith/delegate/1.0.0 protocol ID.
type Dialer interface {
	OpenStream(ctx context.Context, p peer.ID) (Stream, error)
}

// PeerFinder lists peers that may offer a profile. Discovery implements it;
// delegation never imports discovery (DESIGN.md).
type PeerFinder interface {
	Candidates(ctx context.Context, profile string) []peer.ID
}

// Profile is a local profile: what it advertises and what runs it.
type Profile struct {
	protocol.Profile
	Timeout time.Duration // per-delegation cap; Config.DefaultTimeout if 0
	// MinBudgetTokens: offers below it are rejected budget_too_low (a
	// model that cannot answer in fewer tokens should say so up front).
	MinBudgetTokens uint64
	// MinTrust is the lowest trust a peer needs to use the profile; others
	// are rejected not_allowed and do not see it in capability answers.
	MinTrust protocol.TrustLevel
	Executor executor.Executor
}

// Admitter is an extra admission rule a node may install (trust policy,
// rate limits). It returns a reject reason, or ReasonUnspecified to admit.
type Admitter func(remote peer.ID, offer *protocol.DelegationOffer) (protocol.RejectReason, string)

// Trace observes every message crossing the wire, for `kith demo` and
// debugging. It must not block.
type Trace func(dir Direction, remote peer.ID, m protocol.Message)

// Direction says whether a traced message was sent or received.
type Direction string

const (
	Sent     Direction = "sent"
	Received Direction = "received"
)

// Config is what an Engine needs. Identity, Store and Dialer are required.
type Config struct {
	Identity *crypto.Identity
	Store    *store.Store
	Dialer   Dialer
	Finder   PeerFinder
	Profiles []Profile
	Admit    Admitter
	Trace    Trace
	Logger   *slog.Logger
	// Registerer receives the engine's Prometheus metrics (metrics.go);
	// nil counts without exporting.
	Registerer prometheus.Registerer

	// Ledger grants VRAM leases to profiles that declare VRAMMiB; nil on a
	// node without a GPU (such profiles are then refused insufficient_vram).
	Ledger *gpu.Ledger
	// NoReoffer stops a requester from offering a preempted delegation to
	// another provider; by default it tries one that has not preempted it.
	NoReoffer bool

	// QueryTrust is the lowest trust whose capability queries are answered.
	QueryTrust protocol.TrustLevel
	// Per-peer token buckets: offers above the rate are rejected
	// rate_limited, queries above theirs go unanswered. 0 means unlimited.
	OffersPerSecond  float64
	OfferBurst       int
	QueriesPerSecond float64
	QueryBurst       int

	MaxRemoteConcurrent int // remote delegations run at once; DefaultMaxRemoteConcurrent if 0
	// MaxRemotePerPeer caps the remote slots one peer may hold, so that a
	// flooding peer cannot take them all; half of MaxRemoteConcurrent
	// (at least 1) if 0.
	MaxRemotePerPeer int
	// MaxUntrustedRemote caps the remote slots that untrusted peers hold
	// together, so that any number of fresh identities cannot keep the
	// pool from the peers the user verified or trusted; a quarter of
	// MaxRemoteConcurrent (at least 1) if 0, none if negative.
	MaxUntrustedRemote int
	DefaultTimeout     time.Duration // DefaultTimeout if 0
	MaxTimeout         time.Duration // DefaultMaxTimeout if 0
	DefaultHopLimit    uint32        // DefaultHopLimit if 0
	CapabilityTTL      time.Duration // lifetime of signed capability assertions; 5m if 0
	Conn               protocol.ConnOptions
	// ReattachBackoff is the first wait between reattach attempts; it
	// doubles up to 5s. 200ms if 0.
	ReattachBackoff time.Duration
	// Latency is the round-trip time to a peer, 0 if unknown; it ranks
	// providers that are otherwise equal. Optional.
	Latency func(peer.ID) time.Duration
	Now     func() time.Time
}

// The engine's defaults. node/config's Default() reads them, so a node
// and an engine built without a config agree.
const (
	DefaultMaxRemoteConcurrent = 4
	DefaultTimeout             = 5 * time.Minute
	DefaultMaxTimeout          = time.Hour
	DefaultHopLimit            = 4
)

func (c *Config) setDefaults() {
	if c.MaxRemoteConcurrent <= 0 {
		c.MaxRemoteConcurrent = DefaultMaxRemoteConcurrent
	}
	if c.MaxRemotePerPeer <= 0 {
		c.MaxRemotePerPeer = max(1, c.MaxRemoteConcurrent/2)
	}
	switch {
	case c.MaxUntrustedRemote == 0:
		c.MaxUntrustedRemote = max(1, c.MaxRemoteConcurrent/4)
	case c.MaxUntrustedRemote < 0:
		c.MaxUntrustedRemote = 0
	}
	c.MaxUntrustedRemote = min(c.MaxUntrustedRemote, c.MaxRemoteConcurrent)
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.DefaultHopLimit == 0 {
		c.DefaultHopLimit = DefaultHopLimit
	}
	if c.CapabilityTTL <= 0 {
		c.CapabilityTTL = 5 * time.Minute
	}
	if c.ReattachBackoff <= 0 {
		c.ReattachBackoff = 200 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Conn.Now == nil {
		c.Conn.Now = c.Now
	}
	if c.Conn.IOTimeout <= 0 {
		c.Conn.IOTimeout = protocol.DefaultIOTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Engine runs both sides of delegation for one node: the provider half
// (provider*.go: admission, the remote pool, the tasks it runs) and the
// requester half (requester*.go, capability.go: the delegations it follows,
// what it knows of providers), over a core both share (store, identity,
// metrics, subscriptions, the run context). Each part's state has its own
// lock, so a busy provider never waits on its requester's bookkeeping.
type Engine struct {
	*core
	*providerHalf
	*requesterHalf
}

// core is what both halves use.
type core struct {
	cfg Config
	log *slog.Logger
	id  *crypto.Identity
	st  *store.Store
	m   *metrics
	// maxPayload is the largest task and result this node carries, in
	// bytes of part content: protocol.MaxPayload, or less when the store
	// cannot hold that much. Capability assertions advertise it.
	maxPayload int

	runMu  sync.Mutex
	runCtx context.Context
	// stopped is set, under runMu, before Run waits for wg: no goroutine
	// is added once Wait may have begun (the race detector reports an Add
	// from zero concurrent with Wait).
	stopped bool
	wg      sync.WaitGroup
	// workers runs the goroutines wg counts.
	workers *workers
	// recovered is closed once Run has resumed what the previous run left
	// open (Reply waits for it: a delegation it answers may be one).
	recovered chan struct{}
	// started is closed once Run has taken its context (see Started).
	started chan struct{}

	subsMu     sync.Mutex
	subs       map[subKey]map[chan store.Event]*subscription
	finals     map[protocol.DelegationID]*store.Delegation // for Wait (keepFinal)
	finalBytes int                                         // of the finals' results
	// live holds the delegations this node requests that a follower
	// drives in this run (requesterHalf.follow) and whose end has not
	// been published: Wait need not read the store to learn that such a
	// one has not ended (subscription.live).
	live map[protocol.DelegationID]struct{}

	// digest is the proof digest this node asks for in its offers and
	// agrees to in its proofs (protocol.ProofDigests): the one it makes
	// fastest, protocol.FastestDigest. Tests set it.
	digest protocol.ProofDigest

	// mutateResult lets tests tamper with a result after it is signed.
	mutateResult func(*protocol.DelegationResult)
}

// askDigest is the proof digest this node asks a provider that sent caps
// for: its own, if the provider speaks protocol.ProofDigests.
func (c *core) askDigest(caps *protocol.CapabilityAssertion) protocol.ProofDigest {
	if caps != nil && protocol.Speaks(caps.Versions, protocol.ProofDigests) {
		return c.digest
	}
	return protocol.DigestSHA256
}

// proofDigest is the digest this node makes the proof of offer o with:
// the one o asks for (1.6), if this node would ask for it too, else
// SHA-256. A requester that asks for a digest can check it, and one this
// node makes slower than SHA-256 is not worth its time.
func (c *core) proofDigest(o *protocol.DelegationOffer) protocol.ProofDigest {
	if o != nil && o.ProofDigest == c.digest {
		return c.digest
	}
	return protocol.DigestSHA256
}

// providerHalf serves offers, queries and reattaches from peers and runs
// tasks, remote and local.
type providerHalf struct {
	*core
	slots   chan struct{} // remote pool
	offers  *peerLimiter
	queries *peerLimiter
	streams *peerLimiter // twice the offer and query rates together

	provMu    sync.Mutex
	profiles  map[string]*Profile
	handlers  map[string]bool                 // profiles added by Register, kept by SetProfiles
	running   map[protocol.DelegationID]*task // remote and local tasks
	perPeer   map[peer.ID]int                 // remote slots held, by peer
	untrusted int                             // remote slots held by untrusted peers

	openDelay time.Duration      // openDelay; tests stretch it
	statusCap int                // providerFlushBytes; tests shrink it
	versions  []protocol.Version // what the capability assertion lists; tests play older peers
	// beforeMergedWrite, when set (tests only), runs before a fast task's
	// one write (finish), after a provisional result went out.
	beforeMergedWrite func()
}

// requesterHalf offers tasks to providers and follows them to their
// result; it hands local work to the provider half.
type requesterHalf struct {
	*core
	prov        *providerHalf
	reqMu       sync.Mutex
	outgoing    map[protocol.DelegationID]*outgoing
	fast        map[answerKey]bool // providers that answered their last offer fast (answersFast)
	caps        map[peer.ID]knownCaps
	capQueries  map[peer.ID]*capQuery // in flight (capabilities)
	idle        *idleStreams          // streams kept for the next offer (streampool.go)
	gates       *streamGates          // places for new streams under providers' stream limits (streamgate.go)
	keptWait    time.Duration         // keptAnswerTimeout; tests shorten it
	createDelay time.Duration         // createDelay; tests stretch it
	// beforeCreate, when set (tests only), runs before a new delegation's
	// record is written, after its offer went out, with the record as it
	// will be written; an error fails the write.
	beforeCreate func(store.Delegation) error
}

// payloadMargin is what an offer or result holds beside its parts
// (identifiers, chain, proof), kept free below the store's value cap.
const payloadMargin = 64 << 10

// MaxPayload is the largest task and result this node carries, in bytes of
// part content.
func (e *core) MaxPayload() int { return e.maxPayload }

type subKey struct {
	role store.Role
	id   protocol.DelegationID
}

// New checks cfg and builds an engine. It does no I/O; Run starts it.
func New(cfg Config) (*Engine, error) {
	if cfg.Identity == nil || cfg.Store == nil || cfg.Dialer == nil {
		return nil, errors.New("delegation: Config needs Identity, Store and Dialer")
	}
	cfg.setDefaults()
	c := &core{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "delegation"),
		id:         cfg.Identity,
		st:         cfg.Store,
		maxPayload: min(protocol.MaxPayload, cfg.Store.MaxValue()-payloadMargin),
		subs:       make(map[subKey]map[chan store.Event]*subscription),
		finals:     make(map[protocol.DelegationID]*store.Delegation),
		live:       make(map[protocol.DelegationID]struct{}),
		recovered:  make(chan struct{}),
		started:    make(chan struct{}),
		workers:    newWorkers(),
		digest:     protocol.FastestDigest(),
	}
	p := &providerHalf{
		core:      c,
		slots:     make(chan struct{}, cfg.MaxRemoteConcurrent),
		offers:    newPeerLimiter(cfg.OffersPerSecond, cfg.OfferBurst),
		queries:   newPeerLimiter(cfg.QueriesPerSecond, cfg.QueryBurst),
		streams:   streamLimiter(cfg),
		profiles:  make(map[string]*Profile),
		handlers:  make(map[string]bool),
		running:   make(map[protocol.DelegationID]*task),
		perPeer:   make(map[peer.ID]int),
		openDelay: openDelay,
		statusCap: providerFlushBytes,
		versions:  protocol.Supported,
	}
	e := &Engine{
		core:         c,
		providerHalf: p,
		requesterHalf: &requesterHalf{
			core:        c,
			prov:        p,
			outgoing:    make(map[protocol.DelegationID]*outgoing),
			fast:        make(map[answerKey]bool),
			caps:        make(map[peer.ID]knownCaps),
			capQueries:  make(map[peer.ID]*capQuery),
			idle:        newIdleStreams(cfg.Conn.IOTimeout),
			gates:       newStreamGates(cfg.Now),
			keptWait:    keptAnswerTimeout,
			createDelay: createDelay,
		},
	}
	e.m = newMetrics(cfg.Registerer, e)
	for i := range cfg.Profiles {
		p := cfg.Profiles[i]
		if err := e.addProfile(&p); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *providerHalf) addProfile(p *Profile) error {
	if err := protocol.CheckProfileName(p.Name); err != nil {
		return fmt.Errorf("delegation: profile: %w", err)
	}
	if p.Executor == nil {
		return fmt.Errorf("delegation: profile %q has no executor", p.Name)
	}
	e.provMu.Lock()
	defer e.provMu.Unlock()
	e.profiles[p.Name] = p
	return nil
}

// Register adds (or replaces) a local profile served by an in-process Go
// handler. It may be called before or after Run.
func (e *providerHalf) Register(name string, h executor.HandlerFunc, opts ...func(*Profile)) error {
	p := &Profile{Profile: protocol.Profile{Name: name, MaxBudgetTokens: 4096}, Executor: h}
	for _, o := range opts {
		o(p)
	}
	if err := e.addProfile(p); err != nil {
		return err
	}
	e.provMu.Lock()
	e.handlers[name] = true
	e.provMu.Unlock()
	return nil
}

// SetProfiles replaces the profiles given in Config (a reloaded config);
// those added by Register stay and keep their names. Delegations already
// running keep the profile they started with; new offers see ps.
func (e *providerHalf) SetProfiles(ps []Profile) error {
	next := make(map[string]*Profile, len(ps))
	for i := range ps {
		p := &ps[i]
		if err := protocol.CheckProfileName(p.Name); err != nil {
			return fmt.Errorf("delegation: profile: %w", err)
		}
		if p.Executor == nil {
			return fmt.Errorf("delegation: profile %q has no executor", p.Name)
		}
		next[p.Name] = p
	}
	e.provMu.Lock()
	defer e.provMu.Unlock()
	for name, p := range e.profiles {
		if e.handlers[name] {
			next[name] = p
		}
	}
	e.profiles = next
	return nil
}

// Profiles lists the local profiles, sorted by name.
func (e *providerHalf) Profiles() []protocol.Profile {
	e.provMu.Lock()
	defer e.provMu.Unlock()
	out := make([]protocol.Profile, 0, len(e.profiles))
	for _, p := range e.profiles {
		out = append(out, p.Profile)
	}
	slices.SortFunc(out, func(a, b protocol.Profile) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (e *providerHalf) profile(name string) (*Profile, bool) {
	e.provMu.Lock()
	defer e.provMu.Unlock()
	p, ok := e.profiles[name]
	return p, ok
}

// Started is closed once Run has taken its context: from then on Delegate
// and HandleStream serve (before, they fail with ErrNotRunning). A caller
// that starts Run on a goroutine waits for it before it lets others in.
func (e *Engine) Started() <-chan struct{} { return e.started }

// Run recovers what a previous run left open, then serves until ctx ends.
// It returns after every goroutine the engine started has stopped.
func (e *Engine) Run(ctx context.Context) error {
	e.loadCapabilities() // before HandleStream and Delegate can run
	e.runMu.Lock()
	if e.runCtx != nil {
		e.runMu.Unlock()
		return errors.New("delegation: Run called twice")
	}
	// What a previous run left open is listed before this run takes work:
	// listed after, a delegation Delegate or HandleStream had just begun
	// was failed as one the restart interrupted (requester_restarted).
	prov, perr := e.openDelegations(store.RoleProvider)
	req, rerr := e.openDelegations(store.RoleRequester)
	e.runCtx = ctx
	e.runMu.Unlock()
	close(e.started)
	err := errors.Join(perr, rerr, e.recoverProvider(prov), e.recoverRequester(req))
	close(e.recovered)
	<-ctx.Done()
	e.runMu.Lock()
	e.stopped = true
	e.runMu.Unlock()
	e.idle.close()
	e.wg.Wait()
	return err
}

// stopping reports whether Run's context has ended.
func (e *core) stopping() bool {
	e.runMu.Lock()
	defer e.runMu.Unlock()
	return e.runCtx != nil && e.runCtx.Err() != nil
}

// goWithRun starts f as an engine goroutine, or reports ErrNotRunning.
func (e *core) goWithRun(f func(ctx context.Context)) error {
	e.runMu.Lock()
	ctx := e.runCtx
	if ctx == nil || ctx.Err() != nil || e.stopped {
		e.runMu.Unlock()
		return ErrNotRunning
	}
	e.wg.Add(1)
	e.runMu.Unlock()
	e.workers.run(ctx, &e.wg, func() {
		defer e.wg.Done()
		f(ctx)
	})
	return nil
}

// Subscribe delivers the events appended to a delegation's log from now on.
// The channel is buffered; a subscriber that falls behind misses events and
// should re-read the log (Events) by sequence number.
func (e *core) Subscribe(role store.Role, id protocol.DelegationID) (<-chan store.Event, func()) {
	ch, _, cancel := e.subscribe(role, id, subscribeBuffer)
	return ch, cancel
}

// subscribeBuffer is the channel buffer of a Subscribe: room for a burst
// of statuses. waitBuffer is Wait's: it acts only on a terminal event, or
// on a missed one by reading the store, so a burst that fills it costs one
// read, where a larger buffer cost every delegation an allocation of
// several KiB (an Event is about 80 bytes).
const (
	subscribeBuffer = 64
	waitBuffer      = 4
)

// subscription is what a subscriber is told beside its channel's events.
type subscription struct {
	// missed: the channel was full when an event came, and one is lost.
	missed atomic.Bool
	// final is the delegation as the transition that ended it wrote it,
	// result included and offer left out, set before that transition's
	// event is sent: Wait returns it without reading the store. Only a
	// transition that set the result hands it over (see transitionAfter).
	final atomic.Pointer[store.Delegation]
	// live: when it subscribed, the delegation (one this node requests)
	// was driven by a follower and had not ended, so the event that ends
	// it comes to this subscription (core.live).
	live bool
}

// subscribe is Subscribe, and also tells the subscriber whether it has
// missed an event (its channel was full) and how the delegation ended.
func (e *core) subscribe(role store.Role, id protocol.DelegationID, buffer int) (<-chan store.Event, *subscription, func()) {
	ch := make(chan store.Event, buffer)
	sub := new(subscription)
	k := subKey{role, id}
	e.subsMu.Lock()
	if e.subs[k] == nil {
		e.subs[k] = make(map[chan store.Event]*subscription)
	}
	e.subs[k][ch] = sub
	if role == store.RoleRequester {
		_, sub.live = e.live[id]
	}
	e.subsMu.Unlock()
	return ch, sub, func() {
		e.subsMu.Lock()
		delete(e.subs[k], ch)
		if len(e.subs[k]) == 0 {
			delete(e.subs, k)
		}
		e.subsMu.Unlock()
	}
}

func (e *core) publish(role store.Role, id protocol.DelegationID, ev store.Event) {
	e.publishFinal(role, id, ev, nil)
}

// setLive marks id as driven by a follower, or no longer (core.live).
func (e *core) setLive(id protocol.DelegationID, live bool) {
	e.subsMu.Lock()
	defer e.subsMu.Unlock()
	if live {
		e.live[id] = struct{}{}
	} else {
		delete(e.live, id)
	}
}

// publishFinal is publish, handing each subscriber final first (when not
// nil). An event that ends a delegation this node requests clears its
// mark in core.live.
func (e *core) publishFinal(role store.Role, id protocol.DelegationID, ev store.Event, final *store.Delegation) {
	e.subsMu.Lock()
	defer e.subsMu.Unlock()
	if role == store.RoleRequester {
		e.dropFinal(id) // it changed since (keepFinal)
		if ev.State.Terminal() {
			delete(e.live, id)
		}
	}
	for ch, sub := range e.subs[subKey{role, id}] {
		if final != nil {
			sub.final.Store(final)
		}
		select {
		case ch <- ev:
		default:
			sub.missed.Store(true)
		}
	}
}

// transition writes a state change (durably) and tells subscribers.
func (e *core) transition(role store.Role, id protocol.DelegationID, to protocol.State, ev store.Event, mutate func(*store.Delegation)) (store.Delegation, error) {
	return e.transitionAfter(role, id, nil, to, ev, mutate)
}

// transitionAfter writes before and then a state change in one durable
// write, and tells subscribers about each event.
func (e *core) transitionAfter(role store.Role, id protocol.DelegationID, before []store.Event, to protocol.State, ev store.Event, mutate func(*store.Delegation)) (store.Delegation, error) {
	d, err := e.st.TransitionAfter(role, id, before, to, ev, mutate)
	if err != nil {
		return d, err
	}
	e.m.end(d, e.cfg.Now())
	first := d.LastSeq - uint64(len(before))
	for i, b := range before {
		b.Seq = first + uint64(i)
		e.publish(role, id, b)
	}
	ev.Seq, ev.State = d.LastSeq, to
	if ev.Type == "" {
		ev.Type = store.EventState
	}
	// A transition that ends a delegation and sets its result wrote all
	// that Wait returns: d is the record as stored, with the result. One
	// that leaves the result alone does not have it in d (the store does
	// not read blobs it does not rewrite), so Wait reads it then.
	var final *store.Delegation
	if to.Terminal() && d.Result != nil {
		f := d
		f.Offer = nil // as Wait's reads return it, whatever mutate set
		final = &f
	}
	e.publishFinal(role, id, ev, final)
	return d, nil
}

// publishNew tells subscribers about the events a new delegation was
// created with, which the store numbered from 1.
func (e *core) publishNew(role store.Role, id protocol.DelegationID, first uint64, evs []store.Event) {
	for i, ev := range evs {
		ev.Seq = first + uint64(i)
		e.publish(role, id, ev)
	}
}

// create stores a new delegation and counts it.
func (e *core) create(d store.Delegation, events ...store.Event) error {
	if err := e.st.CreateDelegation(d, events...); err != nil {
		return err
	}
	if d.CreatedAt.IsZero() {
		d.CreatedAt = e.cfg.Now()
	}
	e.m.create(d, e.cfg.Now())
	return nil
}

func (e *core) appendEvent(role store.Role, id protocol.DelegationID, ev store.Event) error {
	seq, err := e.st.AppendEvent(role, id, ev)
	if err != nil {
		return err
	}
	ev.Seq = seq
	e.publish(role, id, ev)
	return nil
}

func (e *core) trace(dir Direction, remote peer.ID, m protocol.Message) {
	if e.cfg.Trace != nil {
		e.cfg.Trace(dir, remote, m)
	}
}

// traceEncoded is trace for an encoded message: it decodes raw only when
// there is a hook to show it to.
func (e *core) traceEncoded(dir Direction, remote peer.ID, raw []byte) {
	if e.cfg.Trace == nil {
		return
	}
	if m, err := protocol.DecodeMessage(raw); err == nil {
		e.cfg.Trace(dir, remote, m)
	}
}

// Event types in the delegation log, beyond store.EventState.
const (
	EventOffered  = "offered"
	EventAccepted = "accepted"
	EventStatus   = "status"
	EventResult   = "result"
	EventRejected = "rejected"
	EventCancel   = "cancel"
	EventReattach = "reattach"
	EventNote     = "note"
	// EventResult's Data is empty in the log: the result is the
	// delegation's Result, stored once.
	// EventReoffer starts a new attempt at another provider after a
	// preemption: the transcript of a result covers the events after it.
	EventReoffer = "reoffered"
	// EventTurn (multi-turn, protocol 1.3) is a continuation, its Data the
	// exact plaintext sent and received: both sides log it, and the
	// result's transcript covers it.
	EventTurn = "turn"
	// EventPaused is the provider's own note that a task paused for input:
	// its Data is the executor's resume state, never sent.
	EventPaused = "paused"
)
