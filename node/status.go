package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/node/api"
)

const (
	// statusPingTimeout bounds the pings that measure each connected
	// peer's round-trip time for a status report.
	statusPingTimeout = 2 * time.Second
	// statusPingParallel is how many peers are pinged at once.
	statusPingParallel = 16
)

// handleStatus reports reachability, addresses and connections (kith
// status). It pings every connected peer, so the round-trip times are
// those of the paths in use now.
func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	h := n.Host()
	nat := n.nat.snapshot()
	st := api.Status{
		PeerID:           h.ID().String(),
		Version:          Version,
		Reachability:     strings.ToLower(nat.reachability.String()),
		NATTCP:           natType(nat.natTCP),
		NATUDP:           natType(nat.natUDP),
		RelayService:     n.cfg.NAT.Relay,
		Relays:           append([]string{}, n.cfg.NAT.Relays...),
		ListenAddrs:      []string{},
		Addrs:            n.Addrs(),
		RelayAddrs:       []string{},
		ObservedAddrs:    []api.ObservedAddr{},
		ReachableAddrs:   addrStrings(nat.reachable),
		UnreachableAddrs: addrStrings(nat.unreachable),
		Peers:            []api.ConnectedPeer{},
	}
	if st.RelayService {
		st.RelayPolicy = n.cfg.Policy.Mode.String()
	}
	st.NATNote = natNote(nat, h.Network().ListenAddresses())
	for _, a := range h.Network().ListenAddresses() {
		if !isCircuit(a) { // the relay transport "listens" on /p2p-circuit
			st.ListenAddrs = append(st.ListenAddrs, a.String())
		}
	}
	for _, a := range nat.relayAddrs {
		st.RelayAddrs = append(st.RelayAddrs, a.String()+"/p2p/"+h.ID().String())
	}
	slices.Sort(st.RelayAddrs)
	for a, k := range nat.observed {
		st.ObservedAddrs = append(st.ObservedAddrs, api.ObservedAddr{Addr: a, Observers: k})
	}
	slices.SortFunc(st.ObservedAddrs, func(a, b api.ObservedAddr) int {
		if a.Observers != b.Observers {
			return b.Observers - a.Observers
		}
		return strings.Compare(a.Addr, b.Addr)
	})

	byPeer := make(map[peer.ID][]network.Conn)
	for _, c := range h.Network().Conns() {
		byPeer[c.RemotePeer()] = append(byPeer[c.RemotePeer()], c)
	}
	for p, conns := range byPeer {
		cp := api.ConnectedPeer{ID: p.String(), Path: api.PathRelayed}
		if v, err := h.Peerstore().Get(p, "AgentVersion"); err == nil {
			cp.Agent, _ = v.(string)
		}
		for _, c := range conns {
			stat := c.Stat()
			relayed := isRelayed(c)
			if !relayed {
				cp.Path = api.PathDirect
			}
			cp.Conns = append(cp.Conns, api.Conn{
				Addr: c.RemoteMultiaddr().String(), Direction: direction(stat.Direction),
				Relayed: relayed, Limited: stat.Limited, Opened: stat.Opened,
			})
		}
		slices.SortFunc(cp.Conns, func(a, b api.Conn) int { return strings.Compare(a.Addr, b.Addr) })
		if hp, ok := nat.punches[p]; ok {
			cp.HolePunch = &api.HolePunch{At: hp.at, Success: hp.success, ElapsedMillis: millis(hp.elapsed), Error: oneLine(hp.err)}
		}
		st.Peers = append(st.Peers, cp)
	}
	slices.SortFunc(st.Peers, func(a, b api.ConnectedPeer) int { return strings.Compare(a.ID, b.ID) })
	rtts := pingAll(r.Context(), h, st.Peers)
	for i := range st.Peers {
		st.Peers[i].RTTMillis = millis(rtts[i])
	}
	writeJSON(w, http.StatusOK, st)
}

// pingAll measures the round-trip time to each peer with one ping, a few
// at a time; where a ping fails it falls back to libp2p's moving average
// (0 when there is none).
func pingAll(ctx context.Context, h host.Host, peers []api.ConnectedPeer) []time.Duration {
	ctx, cancel := context.WithTimeout(ctx, statusPingTimeout)
	defer cancel()
	out := make([]time.Duration, len(peers))
	sem := make(chan struct{}, statusPingParallel)
	var wg sync.WaitGroup
	for i, cp := range peers {
		p, err := peer.Decode(cp.ID)
		if err != nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if rtt, err := pingOnce(ctx, h, p); err == nil {
				out[i] = rtt
			} else {
				out[i] = h.Peerstore().LatencyEWMA(p)
			}
		})
	}
	wg.Wait()
	return out
}

// pingOnce sends one ping (over a relayed connection too, if that is all
// there is) and stops the pinger.
func pingOnce(ctx context.Context, h host.Host, p peer.ID) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res, ok := <-ping.Ping(ctx, h, p)
	if !ok {
		return 0, ctx.Err()
	}
	return res.RTT, res.Error
}

// natVerdictObservations is how many observations, from peers at
// different IP addresses, go-libp2p wants per transport before it names a
// NAT type (3 × its 3 addresses per local address, observedaddrs).
const natVerdictObservations = 9

// natNote explains unknown NAT types: which public addresses peers have
// observed for each transport, whether the NAT kept the port the node
// listens on (port-preserving, so hole punching has a chance), and how
// far that is from the observations go-libp2p needs for a verdict. A home
// lab that talks only to its relay never gets there.
func natNote(s natSnapshot, listen []ma.Multiaddr) string {
	if s.natTCP != network.NATDeviceTypeUnknown && s.natUDP != network.NATDeviceTypeUnknown {
		return ""
	}
	ports := map[string]bool{} // "tcp/4001", "udp/4001"
	for _, a := range listen {
		for _, proto := range []int{ma.P_TCP, ma.P_UDP} {
			if v, err := a.ValueForProtocol(proto); err == nil {
				ports[ma.ProtocolWithCode(proto).Name+"/"+v] = true
			}
		}
	}
	var parts []string
	for _, fam := range []struct {
		name  string
		proto int
		known bool
	}{{"tcp", ma.P_TCP, s.natTCP != network.NATDeviceTypeUnknown}, {"udp", ma.P_UDP, s.natUDP != network.NATDeviceTypeUnknown}} {
		if fam.known {
			continue
		}
		observers, kept := 0, 0
		var seen []string
		for a, k := range s.observed {
			m, err := ma.NewMultiaddr(a)
			if err != nil {
				continue
			}
			port, err := m.ValueForProtocol(fam.proto)
			if err != nil {
				continue
			}
			observers += k
			seen = append(seen, a)
			if ports[fam.name+"/"+port] {
				kept += k
			}
		}
		switch {
		case observers == 0:
			parts = append(parts, fam.name+": no peer has reported this node's public address yet")
		case kept == observers:
			slices.Sort(seen)
			parts = append(parts, fmt.Sprintf("%s: %s (%d %s), the listening port kept (port-preserving so far)",
				fam.name, strings.Join(seen, ", "), observers, pluralWord(observers, "observation", "observations")))
		default:
			slices.Sort(seen)
			parts = append(parts, fmt.Sprintf("%s: %s (%d %s), the port changed (hole punching may fail)",
				fam.name, strings.Join(seen, ", "), observers, pluralWord(observers, "observation", "observations")))
		}
	}
	return strings.Join(parts, "; ") + fmt.Sprintf("; a NAT type needs %d observations from peers at different addresses", natVerdictObservations)
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func natType(t network.NATDeviceType) string {
	switch t {
	case network.NATDeviceTypeEndpointIndependent:
		return "endpoint-independent"
	case network.NATDeviceTypeEndpointDependent:
		return "endpoint-dependent"
	}
	return "unknown"
}

func direction(d network.Direction) string {
	switch d {
	case network.DirInbound:
		return "inbound"
	case network.DirOutbound:
		return "outbound"
	}
	return "unknown"
}

func addrStrings(as []ma.Multiaddr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	slices.Sort(out)
	return out
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// oneLine joins a multi-line message (go-libp2p's dial errors list one
// address per line) into one line, for tables and logs.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
