package discovery

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// lookupTrace is what kad-dht's query events say about one provider
// lookup: how many sequential round trips it took to reach a node that
// stores the record, and whether that node needed a new connection.
type lookupTrace struct {
	took time.Duration
	// hops is the depth of the first record holder the lookup queried: 1
	// for a peer from the finder's routing table (the lookup's seeds), its
	// parent's depth + 1 for a peer learned from a response.
	hops int
	// dialed: the finder was not connected to that holder, so the query
	// waited for a new connection (on mocknet, identify's round trip
	// before the DHT stream's).
	dialed bool
	// queried and dials are the queries sent and connections opened
	// before the provider came back.
	queried, dials int
	// seeds is how many peers the lookup started from, seedHolders how
	// many of them store the record, and connected to how many of them
	// the finder was connected.
	seeds, seedHolders, seedsConnected int
	// nearHolder: one of the connected servers closest to the key, which
	// FindProviders asks directly, holds the record.
	nearHolder bool
}

// tracedFind finds the provider of c, as k.find does, and traces the
// lookup through kad-dht's query events.
func (k *kadNet) tracedFind(t *testing.T, c *lookupCase) lookupTrace {
	holders := map[peer.ID]bool{}
	for i, h := range k.hosts {
		if k.holdsRecord(t, i, c.profile) {
			holders[h.ID()] = true
		}
	}
	// The lookup's seeds: the bucket size's worth of routing-table peers
	// closest to the key (kad-dht's runQuery).
	key := sha256.Sum256(ProfileKey(c.profile).Hash())
	d := k.dhts[c.finder]
	seeds := d.kad.RoutingTable().NearestPeers(key[:], defaultFindLimit)
	tr := lookupTrace{seeds: len(seeds)}
	for _, p := range d.closestConnected(ProfileKey(c.profile).Hash(), nearProbes) {
		tr.nearHolder = tr.nearHolder || holders[p]
	}
	for _, p := range seeds {
		if holders[p] {
			tr.seedHolders++
		}
		if k.hosts[c.finder].Network().Connectedness(p) == network.Connected {
			tr.seedsConnected++
		}
	}

	type event struct {
		at time.Time
		ev routing.QueryEvent
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ectx, events := routing.RegisterForQueryEvents(ctx)
	var (
		mu  sync.Mutex
		log []event
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		for ev := range events {
			mu.Lock()
			log = append(log, event{time.Now(), *ev})
			mu.Unlock()
		}
	})
	start := time.Now()
	hints, err := d.FindProviders(ectx, c.profile, 1)
	end := time.Now()
	tr.took = end.Sub(start)
	cancel()
	wg.Wait()
	if err != nil {
		t.Fatalf("find %q: %v", c.profile, err)
	}
	if len(hints) != 1 || hints[0].ID != k.hosts[c.provider].ID() {
		t.Fatalf("node %d looking for %q found %+v, want the provider, node %d", c.finder, c.profile, hints, c.provider)
	}

	// The seeds, and the connected servers FindProviders asks directly,
	// are at depth 1: known before the lookup.
	depth := map[peer.ID]int{}
	for _, p := range seeds {
		depth[p] = 1
	}
	dialing := map[peer.ID]bool{}
	for _, e := range log {
		if e.at.After(end) {
			break
		}
		p := e.ev.ID
		switch e.ev.Type {
		case routing.DialingPeer:
			dialing[p] = true
			tr.dials++
		case routing.SendingQuery:
			if depth[p] == 0 {
				depth[p] = 1 // a connected server asked directly
			}
			tr.queried++
			if holders[p] && tr.hops == 0 {
				tr.hops, tr.dialed = depth[p], dialing[p]
			}
		case routing.PeerResponse:
			for _, r := range e.ev.Responses {
				if depth[r.ID] == 0 {
					depth[r.ID] = depth[p] + 1
				}
			}
		}
	}
	return tr
}

// lookupStats summarises traced lookups.
type lookupStats struct {
	latency                      time.Duration
	took                         []time.Duration // sorted
	hops                         []int           // sorted
	dialed, oneHop, seedsHolding int
	nearHolding                  int
	queried, dials               int
	seeds, seedsConnected        int
}

func (s lookupStats) String() string {
	n := len(s.took)
	if n == 0 {
		return "no lookups"
	}
	out := fmt.Sprintf("%d lookups, latency %v per link: time p50 %v, max %v", n, s.latency,
		percentile(s.took, 50).Round(time.Millisecond), s.took[n-1].Round(time.Millisecond))
	if s.latency > 0 {
		rtt := float64(2 * s.latency)
		out += fmt.Sprintf(" (%.2f and %.2f round trips)", float64(percentile(s.took, 50))/rtt, float64(s.took[n-1])/rtt)
	}
	return out + fmt.Sprintf("; hops p50 %d, max %d; %d of %d found in one hop; %d of %d reached the holder over a new connection; %d of %d had a holder among their seeds, %d of %d among the %d connected servers closest to the key; %.1f queries and %.1f dials per lookup; connected to %d of %d seeds",
		s.hops[(50*n+99)/100-1], s.hops[n-1], s.oneHop, n, s.dialed, n, s.seedsHolding, n, s.nearHolding, n, nearProbes,
		float64(s.queried)/float64(n), float64(s.dials)/float64(n), s.seedsConnected, s.seeds)
}

// timeToProvider has a random node advertise a fresh profile and another
// that holds no record of it and is not connected to the provider find it,
// runs times, and traces each lookup.
func (m *scaleMesh) timeToProvider(t *testing.T, rng *rand.Rand, runs int, tag string) lookupStats {
	k := &kadNet{hosts: m.hosts, dhts: m.dhts}
	s := lookupStats{latency: m.currentLatency}
	for r := range runs {
		c := k.prepareLookup(t, rng, fmt.Sprintf("scale-%s-%d", tag, r))
		tr := k.tracedFind(t, &c)
		s.took = append(s.took, tr.took)
		s.hops = append(s.hops, tr.hops)
		if tr.dialed {
			s.dialed++
		}
		if tr.hops == 1 {
			s.oneHop++
		}
		if tr.seedHolders > 0 {
			s.seedsHolding++
		}
		if tr.nearHolder {
			s.nearHolding++
		}
		s.queried += tr.queried
		s.dials += tr.dials
		s.seeds += tr.seeds
		s.seedsConnected += tr.seedsConnected
	}
	slices.Sort(s.took)
	slices.Sort(s.hops)
	return s
}

// setLatency sets every link's latency; mocknet reads it on each write.
func (m *scaleMesh) setLatency(d time.Duration) {
	for _, byPeer := range m.mn.Links() {
		for _, links := range byPeer {
			for l := range links {
				l.SetOptions(mocknet.LinkOptions{Latency: d})
			}
		}
	}
	m.currentLatency = d
}
