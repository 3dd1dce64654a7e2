package discovery

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// AdvertSource is what a node advertises: the delegation engine, adapted
// by package node.
type AdvertSource interface {
	// Advert signs this node's capability advert as it is now.
	Advert() (crypto.Assertion, protocol.CapabilityAssertion, error)
	// Capacity is the node's load now; cheap, asked every Check.
	Capacity() protocol.Capacity
	// ProfileNames are the profiles the node offers, sorted.
	ProfileNames() []string
}

// AdvertPolicy says when Run publishes.
type AdvertPolicy struct {
	// Refresh is how often the full advert is published when nothing
	// changes. Its signed lifetime must be longer (two refreshes at
	// least), so one lost refresh does not make a provider vanish.
	// Zero means DefaultRefresh.
	Refresh time.Duration
	// LoadInterval is the least time between two publications: a
	// meaningful load change (Meaningful) waits until then, and the load at
	// that moment is what goes out, so a burst of changes costs one
	// advert. At least the MinGap its peers enforce. Zero means
	// DefaultLoadInterval.
	LoadInterval time.Duration
	// PushMax is how many providers of a profile push adverts on its topic;
	// the others, ranked behind them, stay silent there and are found
	// through the DHT and asked at request time. Zero means DefaultPushMax;
	// negative, no limit.
	PushMax int
	// Check is how often the load is compared with the last advert's.
	// Zero means DefaultCheck.
	Check time.Duration
	// Repeats are the delays after the topics gain peers at which the
	// advert is published again: once
	// the first heartbeats have grafted the new peers into this node's
	// mesh, and again when the peers beyond them have grafted theirs, so
	// that new nodes hear of this one without waiting for Refresh. Nil
	// means DefaultRepeats.
	Repeats []time.Duration
}

// Defaults of AdvertPolicy.
const (
	DefaultRefresh      = 2 * time.Minute
	DefaultLoadInterval = 10 * time.Second
	DefaultPushMax      = 8
	DefaultCheck        = 250 * time.Millisecond
)

// DefaultRepeats: see AdvertPolicy.Repeats.
var DefaultRepeats = []time.Duration{1500 * time.Millisecond, 6 * time.Second}

func (p AdvertPolicy) withDefaults() AdvertPolicy {
	if p.Refresh <= 0 {
		p.Refresh = DefaultRefresh
	}
	if p.LoadInterval <= 0 {
		p.LoadInterval = DefaultLoadInterval
	}
	if p.PushMax == 0 {
		p.PushMax = DefaultPushMax
	}
	if p.Check <= 0 {
		p.Check = DefaultCheck
	}
	if p.Repeats == nil {
		p.Repeats = DefaultRepeats
	}
	return p
}

// Meaningful reports whether a load change from was to now is worth an
// advert before the next refresh: a requester skips providers with no
// free slot, so becoming full or free again always is; otherwise a change
// of free slots by a quarter of the pool (at least one slot).
func Meaningful(was, now protocol.Capacity) bool {
	if (was.FreeSlots == 0) != (now.FreeSlots == 0) {
		return true
	}
	pool := max(was.Active+was.FreeSlots, now.Active+now.FreeSlots)
	step := max(1, (pool+3)/4)
	d := int64(now.FreeSlots) - int64(was.FreeSlots)
	return d >= int64(step) || -d >= int64(step)
}

// Run publishes src's advert until ctx ends. In the new design: the
// topics of src's profiles are joined (Serve) and left as they change; the
// full advert goes out every Refresh and at once when the profiles change;
// a meaningful load change goes out no sooner than LoadInterval after the
// last advert; on a profile's topic only the first PushMax providers in
// rank publish (pushing). In the legacy design (GossipConfig.Legacy): the
// advert goes out every Refresh and on every load change, as kith did.
// Both repeat the advert after the topics gain peers (Repeats).
func (g *Gossip) Run(ctx context.Context, src AdvertSource, pol AdvertPolicy) {
	pol = pol.withDefaults()
	t := time.NewTicker(pol.Check)
	defer t.Stop()
	var finds sync.WaitGroup
	defer finds.Wait()
	var (
		last         protocol.Capacity
		lastProfiles []string
		lastAt       time.Time // last publication
		lastFull     time.Time
		published    bool
		peers        int
		soon         []time.Time // pending repeats, in order
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		profiles := src.ProfileNames()
		newProfiles := !slices.Equal(profiles, lastProfiles)
		full := !published || newProfiles || now.Sub(lastFull) >= pol.Refresh
		if full {
			// Joins the topics of new profiles, and leaves those of
			// profiles no longer served nor wanted.
			if err := g.Serve(profiles); err != nil {
				g.log.Debug("serve profiles", "err", err)
			}
		}
		if n := g.rendezvous(ctx, &finds, pol.Refresh/4); n != peers {
			if n > peers {
				soon = soon[:0]
				for _, r := range pol.Repeats {
					soon = append(soon, now.Add(r))
				}
			}
			peers = n
		}
		load := src.Capacity()
		repeat := len(soon) > 0 && !now.Before(soon[0])
		var due bool
		if g.legacy {
			due = full || repeat || load != last
		} else {
			// Peers drop adverts closer than MinGap; load changes keep
			// the longer LoadInterval.
			apart := now.Sub(lastAt) >= g.minGap
			due = !published || apart && (full || repeat) ||
				now.Sub(lastAt) >= pol.LoadInterval && Meaningful(last, load)
		}
		if !due {
			continue
		}
		signed, a, err := src.Advert()
		if err != nil {
			g.log.Warn("advert", "err", err)
			continue
		}
		var push func(string) bool
		if !g.legacy && pol.PushMax > 0 {
			push = func(topic string) bool { return g.pushing(topic, pol.PushMax) }
		}
		if err := g.publish(ctx, signed, full, push); err != nil {
			g.log.Debug("publish advert", "err", err)
			continue
		}
		last, lastProfiles, lastAt, published = a.Capacity, profiles, now, true
		if full {
			lastFull = now
		}
		for len(soon) > 0 && !now.Before(soon[0]) {
			soon = soon[1:]
		}
	}
}

// rendezvousLow is the number of topic peers below which a joined topic
// looks for more (the mesh's low mark), and rendezvousPeers how many it
// connects to.
const (
	rendezvousLow   = 3
	rendezvousPeers = 4
	rendezvousWait  = 30 * time.Second
)

// rendezvous connects, for every joined per-profile topic with fewer than
// rendezvousLow peers, to a few peers FindPeers names, at most once every
// every per topic. The look-ups run in wg, which Run waits for. It returns
// TopicPeers, which it counts on the way.
func (g *Gossip) rendezvous(ctx context.Context, wg *sync.WaitGroup, every time.Duration) int {
	now := time.Now()
	g.tmu.Lock()
	joins := slices.Collect(maps.Values(g.topics))
	g.tmu.Unlock()
	var due []*joined
	total := 0
	for _, j := range joins {
		// ListPeers waits for gossipsub's loop: not under tmu.
		n := len(j.topic.ListPeers())
		total += n
		if g.findPeers == nil || g.legacy || j.profile == "" || n >= rendezvousLow {
			continue
		}
		g.tmu.Lock()
		if now.Sub(j.lastFind) >= every {
			j.lastFind = now
			due = append(due, j)
		}
		g.tmu.Unlock()
	}
	for _, j := range due {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, rendezvousWait)
			defer cancel()
			var dials sync.WaitGroup
			n := 0
			for _, ai := range g.findPeers(ctx, j.profile, 2*rendezvousPeers) {
				if ai.ID == g.h.ID() || !g.allowed(ai.ID) || g.h.Network().Connectedness(ai.ID) == network.Connected {
					continue
				}
				if n++; n > rendezvousPeers {
					break
				}
				dials.Go(func() {
					if err := g.h.Connect(ctx, ai); err != nil {
						g.log.Debug("topic peer unreachable", "peer", ai.ID, "profile", j.profile, "err", err)
					}
				})
			}
			dials.Wait()
		})
	}
	return total
}
