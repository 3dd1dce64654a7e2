package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	identifypb "github.com/libp2p/go-libp2p/p2p/protocol/identify/pb"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	msmux "github.com/multiformats/go-multistream"

	"github.com/kithmesh/kith/internal/backoff"
)

// A hole punch offers the addresses the node knows as its public ones,
// and the node knows one only for a transport some public peer has seen
// it use. libp2p keeps one connection per peer, so a node that reaches its
// relay over QUIC never learns its public TCP address, and a peer whose
// network blocks UDP then has nothing to punch to. learnAddrs fills the
// gap: for each transport of the static relays' addresses that no open
// connection has shown an observed address for, it opens one connection
// of that transport to the relay outside the swarm, asks identify what the
// relay sees, and closes it. The address is offered (host addresses and
// hole punches) through the host's AddrsFactory.

const (
	// learnEvery is how often learnAddrs checks that each transport has
	// an observed address; learnRetry is how soon it tries again after a
	// check that could not ask, doubling up to learnEvery.
	learnEvery = 5 * time.Minute
	learnRetry = 5 * time.Second
	// learnTimeout bounds one side connection: dial, handshake, identify.
	learnTimeout = 10 * time.Second
	// maxIdentifyMsg caps the identify message read from the relay.
	maxIdentifyMsg = 8 << 10
)

// transportFamily names the transport of an address for learnAddrs: "tcp",
// "quic-v1", or "" for one it does not handle.
func transportFamily(a ma.Multiaddr) string {
	if _, err := a.ValueForProtocol(ma.P_QUIC_V1); err == nil {
		return "quic-v1"
	}
	if _, err := a.ValueForProtocol(ma.P_TCP); err == nil {
		return "tcp"
	}
	return ""
}

// learnAddrs runs until ctx ends, keeping natState.learned filled.
func (n *Node) learnAddrs(ctx context.Context, h host.Host) {
	relays := staticRelays(n.cfg.NAT.Relays)
	if len(relays) == 0 || n.cfg.NAT.Relay {
		return
	}
	// Ask only once a connection to a relay shows what it sees: a side
	// connection opened before the swarm's own would take its port (TCP
	// keeps a closed connection's ports in TIME_WAIT for a minute), and the
	// swarm would then reach the relay from a port no peer can punch to.
	for len(n.nat.observedFamilies()) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	// A network that blocks a transport blocks it for long: ask less and
	// less often, up to learnEvery.
	retry := backoff.Backoff{Initial: learnRetry, Max: learnEvery}
	for {
		wait := learnEvery
		if !n.learnOnce(ctx, h, relays) {
			wait = retry.Next()
		} else {
			retry.Reset()
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// learnOnce asks a relay, for each transport still missing an observed
// address, what it sees; it reports whether every transport has one now.
func (n *Node) learnOnce(ctx context.Context, h host.Host, relays []peer.AddrInfo) bool {
	sw, ok := h.Network().(*swarm.Swarm)
	if !ok {
		return true
	}
	observed := n.nat.observedFamilies()
	done := true
	for _, ai := range relays {
		for _, a := range ai.Addrs {
			fam := transportFamily(a)
			if fam == "" || observed[fam] || !manet.IsPublicAddr(a) {
				continue
			}
			got, err := askObserved(ctx, sw, ai.ID, a)
			if err != nil {
				n.log.Debug("nat: no observed address yet", "transport", fam, "relay", ai.ID, "err", err)
				done = false
				continue
			}
			if transportFamily(got) != fam {
				continue
			}
			if n.nat.learn(fam, got) {
				n.log.Info("nat: learned a public address from a relay", "addr", got, "relay", ai.ID)
			}
			observed[fam] = true
		}
	}
	return done
}

// askObserved opens a connection to relay at addr outside the swarm, asks
// identify for the address the relay sees this node at, and closes the
// connection. The relay's own identify on that connection finds nobody to
// answer, which costs it nothing but a reset stream.
func askObserved(ctx context.Context, sw *swarm.Swarm, relay peer.ID, addr ma.Multiaddr) (ma.Multiaddr, error) {
	tpt := sw.TransportForDialing(addr)
	if tpt == nil {
		return nil, fmt.Errorf("no transport dials %s", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, learnTimeout)
	defer cancel()
	conn, err := tpt.Dial(ctx, addr, relay)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// What the relay sees is worth offering only if the connection came
	// from a port this node listens on: one from an ephemeral port (TCP
	// cannot reuse the listen port while the swarm holds a connection to
	// the same relay) would give out a port no peer can reach.
	if !fromListenPort(sw, conn.LocalMultiaddr()) {
		return nil, fmt.Errorf("side connection to %s left from %s, not a listen port", addr, conn.LocalMultiaddr())
	}
	go func() { // refuse the relay's streams on this connection
		for {
			s, err := conn.AcceptStream()
			if err != nil {
				return
			}
			_ = s.Reset()
		}
	}()
	s, err := conn.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Reset()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := msmux.SelectProtoOrFail(identify.ID, s); err != nil {
		return nil, err
	}
	var msg identifypb.Identify
	if err := pbio.NewDelimitedReader(s, maxIdentifyMsg).ReadMsg(&msg); err != nil {
		return nil, err
	}
	if len(msg.ObservedAddr) == 0 {
		return nil, errors.New("the relay sent no observed address")
	}
	return ma.NewMultiaddrBytes(msg.ObservedAddr)
}

// fromListenPort reports whether local has the port of one of the swarm's
// listen addresses of its transport.
func fromListenPort(sw *swarm.Swarm, local ma.Multiaddr) bool {
	fam := transportFamily(local)
	port := func(a ma.Multiaddr) string {
		if v, err := a.ValueForProtocol(ma.P_TCP); err == nil {
			return "tcp/" + v
		}
		if v, err := a.ValueForProtocol(ma.P_UDP); err == nil {
			return "udp/" + v
		}
		return ""
	}
	for _, l := range sw.ListenAddresses() {
		if transportFamily(l) == fam && port(l) != "" && port(l) == port(local) {
			return true
		}
	}
	return false
}

// learn records addr as the node's public address for transport family;
// it reports whether that is news.
func (s *natState) learn(family string, addr ma.Multiaddr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.learned == nil {
		s.learned = make(map[string]ma.Multiaddr)
	}
	old := s.learned[family]
	s.learned[family] = addr
	return old == nil || !old.Equal(addr)
}

// observedFamilies lists the transports for which an open connection has
// shown an observed public address.
func (s *natState) observedFamilies() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool)
	for c, a := range s.observed {
		if !c.IsClosed() && manet.IsPublicAddr(a) {
			out[transportFamily(a)] = true
		}
	}
	return out
}

// learnedAddrs returns the addresses learnAddrs found.
func (s *natState) learnedAddrs() []ma.Multiaddr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ma.Multiaddr
	for _, a := range s.learned {
		out = append(out, a)
	}
	return out
}

// addrsFactory is the host's AddrsFactory: the addresses libp2p found,
// plus those learnAddrs learned.
func (n *Node) addrsFactory(addrs []ma.Multiaddr) []ma.Multiaddr {
	out := slices.Clone(addrs)
	for _, a := range n.nat.learnedAddrs() {
		if !slices.ContainsFunc(out, a.Equal) {
			out = append(out, a)
		}
	}
	return out
}
