package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/protocol"
)

// echoProtocol is the baseline's protocol: the bytes written come back.
const echoProtocol = "/kith/bench-echo/1.0.0"

// forwardProtocol is the large payloads' second baseline: the bytes
// written come back once they have all arrived (store and forward).
const forwardProtocol = "/kith/bench-forward/1.0.0"

// maxPayload bounds Options.Payload, the small operations' payload; the
// large phases (Options.Large) carry up to protocol.MaxPayload.
const maxPayload = 256 << 10

// ioTimeout bounds each baseline stream, as the engine bounds its own.
const ioTimeout = 30 * time.Second

// hostPair is the requester host (a) and the provider host (b), connected
// over TCP on loopback.
type hostPair struct {
	ida, idb *crypto.Identity
	a, b     host.Host
	// remoteAddr is the address a's connection to b runs over, for the
	// report: it proves the figures are TCP figures.
	remoteAddr string
	// fwdBuf is the buffer b's store-and-forward handler reads into,
	// reused: the baseline allocates nothing per copy.
	fwdMu  sync.Mutex
	fwdBuf []byte
}

// newHost builds a host with node.Run's options, on loopback.
func newHost(id *crypto.Identity) (host.Host, error) {
	// libp2p's default resource manager, and no libp2p metrics: what a
	// node runs (node/resources.go), less its per-peer limits, which 64
	// concurrent delegations between two hosts would reach (the requester
	// would then hold its streams back, delegation/streamgate.go, and the
	// phase would measure that limit rather than the delegations).
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(rcmgr.DefaultLimits.AutoScale()), rcmgr.WithMetricsDisabled())
	if err != nil {
		return nil, err
	}
	h, err := libp2p.New(
		libp2p.Identity(id.Libp2pKey()),
		libp2p.ResourceManager(rm),
		libp2p.DisableMetrics(),
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.UserAgent("kith/"+node.Version),
	)
	if err != nil {
		return nil, errors.Join(err, rm.Close())
	}
	return h, nil
}

// newHostPair starts two hosts, serves the echo protocol on both and
// connects a to b over TCP only. Close releases everything it started,
// also when it fails half-way.
func newHostPair(ctx context.Context) (_ *hostPair, err error) {
	hp := &hostPair{}
	defer func() {
		if err != nil {
			err = errors.Join(err, hp.Close())
		}
	}()
	if hp.ida, err = crypto.GenerateIdentity(); err != nil {
		return nil, err
	}
	if hp.idb, err = crypto.GenerateIdentity(); err != nil {
		return nil, err
	}
	if hp.a, err = newHost(hp.ida); err != nil {
		return nil, fmt.Errorf("bench: libp2p host: %w", err)
	}
	if hp.b, err = newHost(hp.idb); err != nil {
		return nil, fmt.Errorf("bench: libp2p host: %w", err)
	}
	hp.a.SetStreamHandler(echoProtocol, serveEcho)
	hp.b.SetStreamHandler(echoProtocol, serveEcho)
	hp.b.SetStreamHandler(forwardProtocol, hp.serveForward)

	var tcpAddrs []ma.Multiaddr
	for _, a := range hp.b.Addrs() {
		if _, err := a.ValueForProtocol(ma.P_TCP); err == nil {
			tcpAddrs = append(tcpAddrs, a)
		}
	}
	if len(tcpAddrs) == 0 {
		return nil, fmt.Errorf("bench: second host has no TCP address (has %v)", hp.b.Addrs())
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hp.a.Peerstore().AddAddrs(hp.b.ID(), tcpAddrs, peerstore.PermanentAddrTTL)
	if err := hp.a.Connect(cctx, peer.AddrInfo{ID: hp.b.ID(), Addrs: tcpAddrs}); err != nil {
		return nil, fmt.Errorf("bench: connect hosts: %w", err)
	}
	conns := hp.a.Network().ConnsToPeer(hp.b.ID())
	if len(conns) == 0 {
		return nil, errors.New("bench: hosts connected but no connection is open")
	}
	hp.remoteAddr = conns[0].RemoteMultiaddr().String()
	return hp, nil
}

// Close closes both hosts.
func (hp *hostPair) Close() error {
	var errs []error
	for _, h := range []host.Host{hp.a, hp.b} {
		if h != nil {
			errs = append(errs, h.Close())
		}
	}
	return errors.Join(errs...)
}

// serveEcho copies the stream back to itself until the opener closes its
// side, then closes.
func serveEcho(s network.Stream) {
	_ = s.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.Copy(s, io.LimitReader(s, protocol.MaxPayload)); err != nil {
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

// serveForward reads the payload whole (its size first, 8 bytes big
// endian), then writes it back and closes: a delegation's shape, which
// takes its task whole before it answers, without the delegation.
func (hp *hostPair) serveForward(s network.Stream) {
	_ = s.SetDeadline(time.Now().Add(ioTimeout))
	var size [8]byte
	if _, err := io.ReadFull(s, size[:]); err != nil {
		_ = s.Reset()
		return
	}
	n := binary.BigEndian.Uint64(size[:])
	if n > protocol.MaxPayload {
		_ = s.Reset()
		return
	}
	hp.fwdMu.Lock()
	defer hp.fwdMu.Unlock()
	if uint64(cap(hp.fwdBuf)) < n {
		hp.fwdBuf = make([]byte, n)
	}
	b := hp.fwdBuf[:n]
	_, err := io.ReadFull(s, b)
	if err == nil {
		_, err = s.Write(b)
	}
	if err != nil {
		_ = s.Reset()
		return
	}
	_ = s.Close()
}

// forward is one store-and-forward copy: open a stream from a to b, write
// the payload's size and the payload, read it all back, close.
func (hp *hostPair) forward(ctx context.Context, payload, buf []byte) error {
	s, err := hp.a.NewStream(ctx, hp.b.ID(), forwardProtocol)
	if err != nil {
		return err
	}
	_ = s.SetDeadline(time.Now().Add(ioTimeout))
	fail := func(err error) error {
		_ = s.Reset()
		return fmt.Errorf("forward: %w", err)
	}
	if _, err := s.Write(binary.BigEndian.AppendUint64(nil, uint64(len(payload)))); err != nil {
		return fail(err)
	}
	if _, err := s.Write(payload); err != nil {
		return fail(err)
	}
	if _, err := io.ReadFull(s, buf[:len(payload)]); err != nil {
		return fail(err)
	}
	if !bytes.Equal(buf[:len(payload)], payload) {
		return fail(errors.New("the bytes read back differ from those written"))
	}
	return s.Close()
}

// echo is one baseline operation: open a stream from a to b, write the
// payload, read it back, close. It reads while it writes, so that a
// payload larger than the stream's flow-control window does not stall.
func (hp *hostPair) echo(ctx context.Context, payload, buf []byte) error {
	s, err := hp.a.NewStream(ctx, hp.b.ID(), echoProtocol)
	if err != nil {
		return err
	}
	_ = s.SetDeadline(time.Now().Add(ioTimeout))
	wrote := make(chan error, 1)
	go func() {
		_, err := s.Write(payload)
		if err == nil {
			err = s.CloseWrite()
		}
		wrote <- err
	}()
	_, rerr := io.ReadFull(s, buf[:len(payload)])
	if rerr != nil {
		_ = s.Reset()
	}
	if err := <-wrote; err != nil {
		_ = s.Reset()
		return err
	}
	if rerr != nil {
		return fmt.Errorf("echo: %w", rerr)
	}
	if !bytes.Equal(buf[:len(payload)], payload) {
		_ = s.Reset()
		return errors.New("echo: the bytes read back differ from those written")
	}
	return s.Close()
}
