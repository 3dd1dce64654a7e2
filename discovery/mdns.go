package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/zeroconf/v2"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

const mdnsDomain = "local."

// mdnsMaxAddrs caps the addresses announced: an mDNS answer should fit one
// 1500-byte packet (RFC 6762 §17).
const mdnsMaxAddrs = 8

// MDNSConfig configures StartMDNS.
type MDNSConfig struct {
	Logger   *slog.Logger
	Counters *Counters
	// Profiles are the profile names put in the TXT record as a hint.
	Profiles []string
	// Interfaces to announce and browse on; nil means every interface
	// that is up and can multicast.
	Interfaces []net.Interface
}

// MDNS announces a host as ServiceName on the local network and hands the
// kith peers it hears to a Sink.
type MDNS struct {
	h      host.Host
	cfg    MDNSConfig
	server *zeroconf.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartMDNS announces h and browses for other kith nodes until Close. Each
// answer whose TXT record parses (ParseTXT) becomes a Hint with Source
// SourceMDNS; others are dropped and counted as "mdns/bad_txt". Answers
// without addresses in TXT take the answer's IPs and SRV port (TCP).
func StartMDNS(h host.Host, cfg MDNSConfig, sink Sink) (*MDNS, error) {
	if cfg.Counters == nil {
		cfg.Counters = &Counters{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &MDNS{h: h, cfg: cfg}
	txt, ips, port := m.record()
	if len(ips) == 0 {
		return nil, fmt.Errorf("discovery: mdns: the host listens on no address a LAN peer could reach")
	}
	server, err := zeroconf.RegisterProxy(h.ID().String(), ServiceName, mdnsDomain, port, h.ID().String(), ips, txt, cfg.Interfaces)
	if err != nil {
		return nil, fmt.Errorf("discovery: mdns announce: %w", err)
	}
	m.server = server
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	entries := make(chan *zeroconf.ServiceEntry, 64)
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		var opts []zeroconf.ClientOption
		if cfg.Interfaces != nil {
			opts = append(opts, zeroconf.SelectIfaces(cfg.Interfaces))
		}
		if err := zeroconf.Browse(ctx, ServiceName, mdnsDomain, entries, opts...); err != nil {
			cfg.Logger.Warn("mdns browse", "err", err)
		}
	}()
	go func() {
		defer m.wg.Done()
		for e := range entries {
			m.handle(ctx, e, sink)
		}
	}()
	return m, nil
}

// SetProfiles changes the profile hint in the announced TXT record.
func (m *MDNS) SetProfiles(profiles []string) {
	m.cfg.Profiles = slices.Clone(profiles)
	txt, _, _ := m.record()
	m.server.SetText(txt)
}

// Close stops announcing (with a goodbye packet) and browsing.
func (m *MDNS) Close() error {
	m.cancel()
	m.server.Shutdown()
	m.wg.Wait()
	return nil
}

// record returns the TXT strings, the IPs and the TCP port to announce.
func (m *MDNS) record() (txt []string, ips []string, port int) {
	listen, err := m.h.Network().InterfaceListenAddresses()
	if err != nil {
		listen = m.h.Addrs()
	}
	t := TXT{Peer: m.h.ID(), Profiles: m.cfg.Profiles}
	for _, a := range listen {
		if !lanAddr(a) {
			continue
		}
		if len(t.Addrs) < mdnsMaxAddrs {
			t.Addrs = append(t.Addrs, a)
		}
		if ip, err := manet.ToIP(a); err == nil && !slices.Contains(ips, ip.String()) {
			ips = append(ips, ip.String())
		}
		if p, err := a.ValueForProtocol(ma.P_TCP); err == nil && port == 0 {
			fmt.Sscan(p, &port)
		}
	}
	if port == 0 {
		port = 4001 // an SRV record needs a port; peers use the TXT addresses
	}
	return t.Strings(), ips, port
}

// lanAddr reports whether a is a direct IP address (not relayed).
func lanAddr(a ma.Multiaddr) bool {
	first, _ := ma.SplitFirst(a)
	if first == nil || (first.Code() != ma.P_IP4 && first.Code() != ma.P_IP6) {
		return false
	}
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err != nil
}

func (m *MDNS) handle(ctx context.Context, e *zeroconf.ServiceEntry, sink Sink) {
	t, err := ParseTXT(e.Text)
	if err != nil {
		m.cfg.Counters.Drop(m.cfg.Logger, SourceMDNS, "bad_txt", "instance", e.Instance, "err", err)
		return
	}
	if t.Peer == m.h.ID() {
		return
	}
	addrs := t.Addrs
	if len(addrs) == 0 && e.Port > 0 && e.Port < 65536 {
		for _, ip := range append(slices.Clone(e.AddrIPv4), e.AddrIPv6...) {
			if a, err := manet.FromNetAddr(&net.TCPAddr{IP: ip, Port: e.Port}); err == nil {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		m.cfg.Counters.Drop(m.cfg.Logger, SourceMDNS, "no_address", "peer", t.Peer)
		return
	}
	sink(ctx, Hint{ID: t.Peer, Addrs: addrs, Source: SourceMDNS, Profiles: t.Profiles})
}
