package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
)

// The peer swarm of BenchmarkMemoryPerPeer runs in a child process (this
// test binary, re-run with these variables: see TestMain), so that the node's heap holds
// only its own side of each connection.
const (
	swarmTarget = "KITH_PEER_SWARM_TARGET" // the node's multiaddr with /p2p/
	swarmSize   = "KITH_PEER_SWARM_N"
)

// TestMain runs the peer swarm instead of the tests when
// BenchmarkMemoryPerPeer starts this binary as its child.
func TestMain(m *testing.M) {
	if target := os.Getenv(swarmTarget); target != "" {
		if err := runSwarm(target, os.Getenv(swarmSize)); err != nil {
			fmt.Fprintln(os.Stderr, "peer swarm:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runSwarm connects n peers to target, says so on stdout, and holds them
// until stdin closes.
func runSwarm(target, size string) error {
	n, err := strconv.Atoi(size)
	if err != nil || n < 1 {
		return fmt.Errorf("%s=%q: want a positive number", swarmSize, size)
	}
	ai, err := peer.AddrInfoFromString(target)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range n {
		h, err := libp2p.New(
			libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"),
			libp2p.Transport(tcp.NewTCPTransport),
			libp2p.Transport(quic.NewTransport),
			libp2p.UserAgent("kith/"+Version),
		)
		if err != nil {
			return err
		}
		defer h.Close()
		// A kith node speaks gossipsub and the private DHT with each
		// peer: so do the swarm's peers, so that the node keeps the
		// state it keeps for a real one.
		if err := joinLikeANode(ctx, h); err != nil {
			return err
		}
		if err := h.Connect(ctx, *ai); err != nil {
			return fmt.Errorf("peer %d: %w", i, err)
		}
	}
	fmt.Println("swarm connected")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	return nil
}

func joinLikeANode(ctx context.Context, h host.Host) error {
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		return err
	}
	if _, err := ps.Join("/kith/capabilities/1"); err != nil {
		return err
	}
	_, err = dht.New(ctx, h, dht.Mode(dht.ModeServer), dht.ProtocolPrefix("/kith"))
	return err
}

// BenchmarkMemoryPerPeer reports what a running node holds per connected
// peer: live heap and goroutine stacks after a GC (KiB/peer, with its heap
// and stack parts), and the growth of its resident set (rss-KiB/peer, which
// also counts the collector's headroom). 100 real libp2p peers, each
// speaking gossipsub and the DHT as a kith node does, connect from a child
// process. Beside it, in the same run, the same swarm against a bare
// go-libp2p host with default options (bare-KiB/peer) and the ratio.
// KITH_PEERMEM_PROFILE=FILE writes the node's heap profiles (FILE.T.before,
// FILE.T) and goroutines (FILE.T.goroutines) for transport T.
func BenchmarkMemoryPerPeer(b *testing.B) {
	if os.Getenv("KITH_PEERMEM_PROFILE") != "" {
		runtime.MemProfileRate = 512
	}
	for _, tr := range []string{"tcp", "quic-v1"} {
		b.Run(tr, func(b *testing.B) {
			for range b.N {
				bare := bareHostMemory(b, tr)
				n, cancel, done := startNode(b, "/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1")
				node := peerMemory(b, n.Host(), tr, os.Getenv("KITH_PEERMEM_PROFILE"))
				cancel()
				<-done
				b.ReportMetric(node.total(), "KiB/peer")
				b.ReportMetric(node.heap, "heap-KiB/peer")
				b.ReportMetric(node.stack, "stack-KiB/peer")
				b.ReportMetric(node.goroutines, "goroutines/peer")
				if node.rss > 0 {
					b.ReportMetric(node.rss, "rss-KiB/peer")
				}
				b.ReportMetric(bare.total(), "bare-KiB/peer")
				b.ReportMetric(node.total()/bare.total(), "x-bare")
			}
		})
	}
}

// bareHostMemory measures a default go-libp2p host, the baseline.
func bareHostMemory(b *testing.B, transport string) memPerPeer {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"))
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	return peerMemory(b, h, transport, "")
}

type memPerPeer struct{ heap, stack, rss, goroutines float64 }

func (m memPerPeer) total() float64 { return m.heap + m.stack }

const swarmPeers = 100

// peerMemory connects the swarm to h over transport and returns what this
// process grew by, per peer.
func peerMemory(b *testing.B, h host.Host, transport, profile string) memPerPeer {
	settle := func() (heap, stack uint64) {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc, ms.StackInuse
	}
	writeProfile := func(name, suffix string) {
		if profile == "" {
			return
		}
		if w, err := os.Create(profile + "." + transport + suffix); err == nil {
			_ = pprof.Lookup(name).WriteTo(w, 1)
			w.Close()
		}
	}
	heapBefore, stackBefore := settle()
	rssBefore := rss()
	goroutinesBefore := runtime.NumGoroutine()
	writeProfile("heap", ".before")

	var target string
	for _, a := range h.Addrs() {
		if strings.Contains(a.String(), "/"+transport) {
			target = a.String() + "/p2p/" + h.ID().String()
		}
	}
	if target == "" {
		b.Fatalf("host has no %s address: %v", transport, h.Addrs())
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), swarmTarget+"="+target, swarmSize+"="+strconv.Itoa(swarmPeers))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	sc := bufio.NewScanner(out)
	connected := false
	for !connected && sc.Scan() {
		connected = strings.Contains(sc.Text(), "swarm connected")
	}
	if !connected {
		b.Fatal("the peer swarm did not connect")
	}
	// Let identify, gossipsub and the DHT finish with each peer: until
	// every peer is connected and the goroutine count holds still.
	deadline := time.Now().Add(20 * time.Second)
	last, still := -1, 0
	for time.Now().Before(deadline) && still < 5 {
		n := runtime.NumGoroutine()
		if n == last && len(h.Network().Peers()) >= swarmPeers {
			still++
		} else {
			last, still = n, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := len(h.Network().Peers()); got < swarmPeers {
		b.Fatalf("host has %d peers, want %d", got, swarmPeers)
	}
	heapAfter, stackAfter := settle()
	rssAfter := rss()
	writeProfile("heap", "")
	writeProfile("goroutine", ".goroutines")
	perPeer := func(after, before uint64) float64 {
		return float64(int64(after)-int64(before)) / swarmPeers / 1024
	}
	m := memPerPeer{
		heap:       perPeer(heapAfter, heapBefore),
		stack:      perPeer(stackAfter, stackBefore),
		goroutines: float64(runtime.NumGoroutine()-goroutinesBefore) / swarmPeers,
	}
	if rssBefore > 0 && rssAfter > 0 {
		m.rss = perPeer(rssAfter, rssBefore)
	}
	return m
}

// rss is this process's resident set in bytes, 0 where /proc is missing.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
