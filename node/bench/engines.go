package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// StoreKind is where the engines of a delegation phase keep their state.
type StoreKind string

const (
	// StoreMemory is store.OpenInMemory: no disk at all.
	StoreMemory StoreKind = "memory"
	// StoreNoSync is an on-disk store with Options.NoSync: the disk writes
	// without waiting for them.
	StoreNoSync StoreKind = "nosync"
	// StoreDurable is an on-disk store with the default options, as a node
	// runs by default (store.durable = true): every commit synced.
	StoreDurable StoreKind = "durable"
)

// AllStores is every StoreKind, in the order phases run.
var AllStores = []StoreKind{StoreMemory, StoreNoSync, StoreDurable}

func (k StoreKind) valid() bool {
	return k == StoreMemory || k == StoreNoSync || k == StoreDurable
}

// side is one host's delegation engine and its store.
type side struct {
	st     *store.Store
	writes *store.Metrics // counts st's writes (Anatomy)
	eng    *delegation.Engine
	cancel context.CancelFunc
	done   chan error
}

// engines is a requester engine on host a and a provider engine on host b
// that share one kind of store.
type engines struct {
	kind   StoreKind
	peerB  peer.ID
	budget uint64
	a, b   side
	// streams counts the delegation streams the requester opened: one per
	// delegation when all goes well, more when an attempt failed and the
	// engine reattached.
	streams atomic.Int64
}

// hostDialer opens delegation streams as node.Run's does, and counts them.
type hostDialer struct {
	h host.Host
	n *atomic.Int64
}

func (d hostDialer) OpenStream(ctx context.Context, p peer.ID) (delegation.Stream, error) {
	d.n.Add(1)
	return d.h.NewStream(ctx, p, protocol.ID)
}

// engineConfig is node.Run's engine config for the default node config,
// except for the remote slots, which the bench sizes to its concurrency (a
// default node has 4 and would answer busy beyond them).
func engineConfig(id *crypto.Identity, st *store.Store, d hostDialer, slots int, capBudget uint64) delegation.Config {
	cfg := config.Default()
	l := cfg.Limits
	echo := config.Profile{Name: "echo", Executor: config.ExecutorEcho}
	for _, p := range cfg.Profiles {
		if p.Executor == config.ExecutorEcho {
			echo = p
		}
	}
	return delegation.Config{
		Identity: id, Store: st, Dialer: d,
		Profiles: []delegation.Profile{{
			Profile: protocol.Profile{
				Name: echo.Name, Description: echo.Description, Skills: echo.Skills,
				MaxBudgetTokens: max(capBudget, echo.EffectiveMaxBudgetTokens()),
			},
			Timeout:  echo.EffectiveTimeout(l),
			Executor: executor.Echo{},
		}},
		MaxRemoteConcurrent: slots,
		// One requester uses the whole pool: a default node gives a peer
		// half, and the bench's workers would then meet a slot whose
		// delegation has answered but not yet let go of it.
		MaxRemotePerPeer: slots,
		DefaultTimeout:   l.DefaultTimeout.Std(),
		MaxTimeout:       l.MaxTimeout.Std(),
		DefaultHopLimit:  uint32(l.DefaultHopLimit),
		Conn: protocol.ConnOptions{
			MaxFrame:  l.MaxFrameBytes,
			IOTimeout: l.StreamIdleTimeout.Std(),
			MaxSkew:   l.EnvelopeMaxSkew.Std(),
		},
	}
}

func openStore(kind StoreKind, dir string, m *store.Metrics) (*store.Store, error) {
	switch kind {
	case StoreMemory:
		return store.OpenInMemory(store.Options{Metrics: m})
	case StoreNoSync:
		return store.Open(dir, store.Options{NoSync: true, Metrics: m})
	case StoreDurable:
		return store.Open(dir, store.Options{Metrics: m})
	}
	return nil, fmt.Errorf("bench: unknown store kind %q", kind)
}

// startEngines opens two stores of kind under dir, starts an engine on
// each host and makes them the ones hp's delegation handlers serve (see
// activate). It
// returns once each engine has answered the other's capability query,
// which also fills a's capability cache, so that no phase counts the
// query Delegate makes once per peer per half TTL. Close stops them.
func startEngines(ctx context.Context, hp *hostPair, kind StoreKind, dir string, slots int, budget, capBudget uint64) (_ *engines, err error) {
	e := &engines{kind: kind, peerB: hp.b.ID(), budget: budget}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	for _, s := range []struct {
		side *side
		id   *crypto.Identity
		h    host.Host
		name string
	}{{&e.a, hp.ida, hp.a, "a"}, {&e.b, hp.idb, hp.b, "b"}} {
		m := store.NewMetrics(prometheus.NewRegistry())
		st, err := openStore(kind, filepath.Join(dir, string(kind)+"-"+s.name), m)
		if err != nil {
			return nil, err
		}
		s.side.st, s.side.writes = st, m
		eng, err := delegation.New(engineConfig(s.id, st, hostDialer{s.h, &e.streams}, slots, capBudget))
		if err != nil {
			return nil, err
		}
		runCtx, cancel := context.WithCancel(context.Background())
		s.side.eng, s.side.cancel, s.side.done = eng, cancel, make(chan error, 1)
		go func() { s.side.done <- eng.Run(runCtx) }()
	}
	// The two nodes are one user's: each trusts the other, as after "kith
	// peers trust", so the whole remote pool is theirs (untrusted peers
	// share only a slot or two of it).
	for _, x := range []struct {
		st    *store.Store
		other peer.ID
	}{{e.a.st, hp.b.ID()}, {e.b.st, hp.a.ID()}} {
		if err := x.st.SetTrust(x.other, protocol.Trusted, "kith bench"); err != nil {
			return nil, err
		}
	}
	e.activate(hp)
	// Engine.Run takes its context in its own goroutine: until it has, the
	// engine refuses streams, and the query is retried.
	for _, q := range []struct {
		from *delegation.Engine
		to   peer.ID
	}{{e.a.eng, hp.b.ID()}, {e.b.eng, hp.a.ID()}} {
		if err := queryUntilReady(ctx, q.from, q.to); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// activate points both hosts' delegation handlers at these engines. Phases
// run one at a time, so engines of every store kind can stay started for
// the whole run and take turns on the same two hosts.
func (e *engines) activate(hp *hostPair) {
	for _, x := range []struct {
		h   host.Host
		eng *delegation.Engine
	}{{hp.a, e.a.eng}, {hp.b, e.b.eng}} {
		x.h.SetStreamHandler(protocol.ID, func(s network.Stream) {
			x.eng.HandleStream(s, s.Conn().RemotePeer())
		})
	}
}

// switchTo makes e the engines that serve the hosts' delegation streams
// (activate), after closing the streams the other engines keep for later
// offers (protocol 1.4): the hosts' limits on a peer's streams would count
// them against e's.
func switchTo(sets map[StoreKind]*engines, e *engines, hp *hostPair) {
	for _, o := range sets {
		if o != e {
			o.a.eng.CloseIdleStreams()
			o.b.eng.CloseIdleStreams()
		}
	}
	e.activate(hp)
}

func queryUntilReady(ctx context.Context, from *delegation.Engine, to peer.ID) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := from.QueryCapabilities(ctx, to)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: engine not ready: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Close stops both engines (Run returns once every goroutine they started
// has stopped) and closes their stores. An engine that is stopped refuses
// the streams its handler still passes it.
func (e *engines) Close() error {
	var errs []error
	for _, s := range []*side{&e.a, &e.b} {
		if s.cancel != nil {
			s.cancel()
			if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
		if s.st != nil {
			errs = append(errs, s.st.Close())
		}
	}
	return errors.Join(errs...)
}

// delegate is one delegation operation: an echo of text from a to b,
// followed to its end, checked to have completed with the text echoed.
func (e *engines) delegate(ctx context.Context, text string) (protocol.DelegationID, error) {
	return e.delegateBudget(ctx, text, e.budget)
}

// delegateBudget is delegate with the given token budget.
func (e *engines) delegateBudget(ctx context.Context, text string, budget uint64) (protocol.DelegationID, error) {
	id, err := e.a.eng.Delegate(ctx, delegation.Request{
		Profile: "echo", Peer: e.peerB, BudgetTokens: budget, Timeout: ioTimeout,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(text)}},
	})
	if err != nil {
		return id, err
	}
	d, err := e.a.eng.Wait(ctx, id)
	if err != nil {
		return id, err
	}
	if d.State != protocol.StateCompleted {
		return id, fmt.Errorf("delegation %s ended %s: %s", id, d.State, d.Reason)
	}
	if out := delegation.Output(d); out != text {
		return id, fmt.Errorf("delegation %s echoed %d bytes, sent %d", id, len(out), len(text))
	}
	return id, nil
}

// Anatomy is what one delegation wrote to each side's store, and when.
// Each write is one store transaction: on a durable store, one that waits
// for the disk (the commit log's synced write, store/commitlog.go), or
// shares that wait with the others of its batch.
type Anatomy struct {
	Store StoreKind `json:"store"`
	// RoundTrip is Delegate to Wait's return for this one delegation.
	RoundTrip time.Duration `json:"round_trip_ns"`
	// RequesterWrites counts the requester's store transactions while
	// the delegation ran, ProviderWrites the provider's (each store's
	// kith_store_commit_seconds observations).
	RequesterWrites int `json:"requester_writes"`
	ProviderWrites  int `json:"provider_writes"`
	// Steps are the creates and events, by the time each carries, in time
	// order: events written together share one. A requester's record
	// carries the time Delegate began it, also when it was written later
	// with the result.
	Steps []Step `json:"steps"`
}

// Step is one store write of a delegation.
type Step struct {
	Side  string        `json:"side"` // requester or provider
	Write string        `json:"write"`
	At    time.Duration `json:"at_ns"` // since Delegate was called
}

// anatomy runs one delegation and reads back what it wrote. A few go
// before it, so that it does not pay for first uses (stream, memtable,
// caches).
func (e *engines) anatomy(ctx context.Context, text string) (Anatomy, error) {
	for range 3 {
		if _, err := e.delegate(ctx, text); err != nil {
			return Anatomy{}, err
		}
	}
	before := [2]uint64{e.a.writes.Commits(), e.b.writes.Commits()}
	t0 := time.Now()
	id, err := e.delegate(ctx, text)
	if err != nil {
		return Anatomy{}, err
	}
	a := Anatomy{Store: e.kind, RoundTrip: time.Since(t0)}
	// A provider sends a fast task's result while its write syncs
	// (protocol 1.5): it may land after Wait returned.
	var prov store.Delegation
	for {
		if prov, err = e.b.st.DelegationInfo(store.RoleProvider, id); err == nil && prov.State.Terminal() {
			break
		}
		if ctx.Err() != nil {
			return Anatomy{}, fmt.Errorf("bench: the provider's record of %s: %v (%w)", id, err, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	a.RequesterWrites = int(e.a.writes.Commits() - before[0])
	a.ProviderWrites = int(e.b.writes.Commits() - before[1])
	for _, s := range []struct {
		side store.Role
		st   *store.Store
	}{{store.RoleRequester, e.a.st}, {store.RoleProvider, e.b.st}} {
		d, err := s.st.GetDelegation(s.side, id)
		if err != nil {
			return Anatomy{}, err
		}
		evs, err := s.st.Events(s.side, id, 0)
		if err != nil {
			return Anatomy{}, err
		}
		a.Steps = append(a.Steps, Step{Side: s.side.String(), Write: "create", At: d.CreatedAt.Sub(t0)})
		for _, ev := range evs {
			a.Steps = append(a.Steps, Step{Side: s.side.String(), Write: ev.Type + " (" + ev.State.String() + ")", At: ev.At.Sub(t0)})
		}
	}
	slices.SortStableFunc(a.Steps, func(x, y Step) int { return cmp.Compare(x.At, y.At) })
	return a, nil
}
