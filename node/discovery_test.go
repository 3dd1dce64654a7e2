package node

import (
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/config"
)

// Two running nodes that are merely connected (no discovery hint, so no
// capability query) learn each other's profiles and load from the adverts
// gossiped on /kith/capabilities/1.
func TestNodesLearnCapabilitiesFromGossip(t *testing.T) {
	fast := func(c *config.Config) {
		c.Discovery.DHT = config.DHTOff
		c.Discovery.AdvertInterval = config.Duration(time.Second)
	}
	a := startWith(t, func(c *config.Config) {
		fast(c)
		c.Profiles = append(c.Profiles, config.Profile{Name: "gossiped", Executor: config.ExecutorEcho})
	})
	b := startWith(t, fast)
	if err := connect(b, a); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "b knows a's profiles from its advert", func() bool {
		k, ok := b.Engine().KnownCapabilities()[a.PeerID()]
		return ok && k.Source == "gossip" && len(k.Assertion.Profiles) == 2 &&
			k.Assertion.Capacity.FreeSlots == uint32(config.Default().Limits.MaxRemoteConcurrent)
	})
}
