package discovery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/kithmesh/kith/node/config"
)

// The harness's hosts run a node's connection-manager policy
// (node/connmgr.go): go-libp2p's basic connection manager with the
// configured water marks, a grace period for new connections, and the
// node's static peer protected. mocknet builds its hosts without one, and
// without it a node at N = 1,000 held 358–385 connections after the DHT's
// bootstrap, where a node trims past conns_high to conns_low.
//
// The water marks come from node/config's defaults (a _test file of
// discovery may import it: the import rules in deps_test.go are about the
// packages' own code, and node/config does not import discovery). The
// grace period and the tag of static peers are node/connmgr.go's
// unexported connGrace and protectStatic, which discovery cannot import
// (node imports discovery): scaleConnGrace and scaleProtectStatic repeat
// them, and docs/scale.md says so.
const (
	scaleConnGrace     = time.Minute   // node/connmgr.go connGrace
	scaleProtectStatic = "kith-static" // node/connmgr.go protectStatic
)

// managedHost is a mocknet host with a connection manager: kad-dht and
// gossipsub tag and protect peers through ConnManager, as on a node.
type managedHost struct {
	host.Host
	cm *basicconnmgr.BasicConnMgr
}

func (h *managedHost) ConnManager() connmgr.ConnManager { return h.cm }

// withConnManager gives h the node's policy. kad-dht and gossipsub tag
// and protect peers through it from the start; it counts connections, and
// so trims, once manageConns hands them over.
func withConnManager(t *testing.T, h host.Host) *managedHost {
	d := config.Default().Discovery
	// KITH_SCALE_CONNS=low/high tries other water marks than a node's
	// defaults (e.g. 160/256, enough to keep a thousand-node routing
	// table connected).
	if s := os.Getenv("KITH_SCALE_CONNS"); s != "" {
		if _, err := fmt.Sscanf(s, "%d/%d", &d.ConnsLow, &d.ConnsHigh); err != nil || d.ConnsLow <= 0 || d.ConnsHigh < d.ConnsLow {
			t.Fatalf("KITH_SCALE_CONNS=%q: want low/high, e.g. 160/256", s)
		}
	}
	cm, err := basicconnmgr.NewConnManager(d.ConnsLow, d.ConnsHigh, basicconnmgr.WithGracePeriod(scaleConnGrace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cm.Close() })
	return &managedHost{Host: h, cm: cm}
}

// manageConns hands every host's connections, and those it makes from now
// on, to its connection manager, which from then on trims on its own, as
// on a node: every 10 s (go-libp2p's silence period) while the host is at
// conns_high or above, connections older than the grace period, least
// valuable first.
//
// The harness calls it once the DHT has bootstrapped. A thousand nodes
// joining at once, 48 at a time, is the harness's way to build a mesh, not
// how one grows; with the managers trimming through it, the bootstrap of
// N = 1,000 with 20 ms links had not ended after 20 minutes (each trim
// closes connections that the next refresh dials again, and a query on a
// closed connection takes its peer out of the routing table).
func (m *scaleMesh) manageConns() {
	for _, h := range m.managed {
		// A connection made in between is notified twice; the manager
		// ignores the second.
		h.Network().Notify(h.cm.Notifee())
		for _, c := range h.Network().Conns() {
			h.cm.Notifee().Connected(h.Network(), c)
		}
	}
}

// connStats are the connections per node: mean, min and max.
type connStats struct {
	mean     float64
	min, max int
}

func (c connStats) String() string {
	return fmt.Sprintf("%.0f connections per node (%d–%d)", c.mean, c.min, c.max)
}

// cell is the table's form.
func (c connStats) cell() string { return fmt.Sprintf("%.0f (%d–%d)", c.mean, c.min, c.max) }

func (m *scaleMesh) connStats() connStats {
	var n []int
	for _, h := range m.hosts {
		n = append(n, len(h.Network().Peers()))
	}
	total := 0
	for _, c := range n {
		total += c
	}
	return connStats{mean: float64(total) / float64(len(n)), min: slices.Min(n), max: slices.Max(n)}
}

// trimAll waits until the connections made before since are past the
// grace period, and then has every node's connection manager trim, as its
// own loop would at its next tick. (The loop runs every 10 s and trims only
// at conns_high or above; this brings every node to where a node that had
// run a while would be.)
func (m *scaleMesh) trimAll(since time.Time) {
	if len(m.managed) == 0 {
		return
	}
	time.Sleep(time.Until(since.Add(scaleConnGrace)))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, h := range m.managed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h.cm.TrimOpenConns(context.Background())
		})
	}
	wg.Wait()
}

// keepAll runs every node's keep (DHT.Run's), which redials the peers of
// its routing table's two widest buckets when they disconnect, until the
// test ends.
func (m *scaleMesh) keepAll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	for _, d := range m.dhts {
		wg.Go(func() { d.keep(ctx) })
	}
}

// waitKept waits, up to a minute, until the kept peers that the trim
// disconnected are connected again (all but 1%, or no change in three
// seconds), and logs how many are.
func (m *scaleMesh) waitKept(t *testing.T) {
	start := time.Now()
	var kept, connected, last, same int
	for {
		kept, connected = 0, 0
		for i, d := range m.dhts {
			for _, p := range d.keptPeers() {
				kept++
				if m.hosts[i].Network().Connectedness(p) == network.Connected {
					connected++
				}
			}
		}
		if connected == last {
			same++
		} else {
			same = 0
		}
		last = connected
		if kept-connected <= kept/100 || same == 3 || time.Since(start) > time.Minute {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("scale: %d of %d kept peers (the routing tables' two widest buckets) connected %v after the trim; %s", connected, kept, time.Since(start).Round(time.Millisecond), m.connStats())
}
