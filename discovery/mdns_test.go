package discovery

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/zeroconf/v2"

	"github.com/kithmesh/kith/internal/labtest"
)

// hints collects what a sink receives.
type hints struct {
	mu  sync.Mutex
	got []Hint
	ch  chan struct{}
}

func newHints() *hints { return &hints{ch: make(chan struct{}, 1)} }

func (h *hints) sink(_ context.Context, x Hint) {
	h.mu.Lock()
	h.got = append(h.got, x)
	h.mu.Unlock()
	select {
	case h.ch <- struct{}{}:
	default:
	}
}

// wait returns the first hint about id, failing after a generous bound.
func (h *hints) wait(t *testing.T, id peer.ID) Hint {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		h.mu.Lock()
		for _, x := range h.got {
			if x.ID == id {
				h.mu.Unlock()
				return x
			}
		}
		h.mu.Unlock()
		select {
		case <-h.ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("no mDNS hint about %s", id)
		}
	}
}

func newLoopbackHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestMDNSPeersFindEachOther(t *testing.T) {
	labtest.PrivateMulticast(t, "./discovery")
	a, b := newLoopbackHost(t), newLoopbackHost(t)
	ha, hb := newHints(), newHints()
	start := time.Now()
	ma, err := StartMDNS(a, MDNSConfig{Profiles: []string{"echo", "llm"}}, ha.sink)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := StartMDNS(b, MDNSConfig{Profiles: []string{"summarize"}}, hb.sink)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()

	got := hb.wait(t, a.ID())
	t.Logf("mDNS: b heard a after %v", time.Since(start))
	if got.Source != SourceMDNS || !slices.Equal(got.Profiles, []string{"echo", "llm"}) {
		t.Fatalf("hint about a: %+v", got)
	}
	if err := b.Connect(context.Background(), got.AddrInfo()); err != nil {
		t.Fatalf("b connects to a at the announced addresses %v: %v", got.Addrs, err)
	}
	if x := ha.wait(t, b.ID()); !slices.Equal(x.Profiles, []string{"summarize"}) {
		t.Fatalf("hint about b: %+v", x)
	}
	ha.mu.Lock()
	defer ha.mu.Unlock()
	for _, x := range ha.got {
		if x.ID == a.ID() {
			t.Fatal("a node handed itself on as a hint")
		}
	}
}

func TestMDNSBadAnnouncementsAreCounted(t *testing.T) {
	labtest.PrivateMulticast(t, "./discovery")
	other := testPeer(t, 7)
	bad := map[string][]string{
		"garbage-id": {"peer=notapeer"},
		"no-id":      {"profiles=echo"},
		"wrong-addr": {"peer=" + other.String(), "dnsaddr=/ip4/127.0.0.1/tcp/9/p2p/" + testPeer(t, 8).String()},
	}
	for name, txt := range bad {
		s, err := zeroconf.RegisterProxy(name, ServiceName, mdnsDomain, 9, name, []string{"127.0.0.1"}, txt, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Shutdown()
	}
	a := newLoopbackHost(t)
	good := newLoopbackHost(t)
	mg, err := StartMDNS(good, MDNSConfig{}, func(context.Context, Hint) {})
	if err != nil {
		t.Fatal(err)
	}
	defer mg.Close()

	var c Counters
	h := newHints()
	m, err := StartMDNS(a, MDNSConfig{Counters: &c}, h.sink)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h.wait(t, good.ID()) // the good one still gets through
	deadline := time.Now().Add(20 * time.Second)
	for c.Get("mdns/bad_txt") < uint64(len(bad)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := c.Get("mdns/bad_txt"); n < uint64(len(bad)) {
		t.Fatalf("mdns/bad_txt = %d, want at least %d (counters %v)", n, len(bad), c.Snapshot())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range h.got {
		if x.ID != good.ID() {
			t.Fatalf("a bad announcement became a hint: %+v", x)
		}
	}
}

// TestMDNSThirdPartyBrowser checks the announcement with a browser nobody
// here wrote: Debian's python3-zeroconf.
func TestMDNSThirdPartyBrowser(t *testing.T) {
	labtest.PrivateMulticast(t, "./discovery")
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import zeroconf").Run(); err != nil {
		labtest.Lacking(t, labtest.NetnsRequired, "python3-zeroconf is not installed (apt-get install python3-zeroconf)")
	}
	a := newLoopbackHost(t)
	m, err := StartMDNS(a, MDNSConfig{Profiles: []string{"echo"}}, func(context.Context, Hint) {})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const script = `
import sys, time
from zeroconf import Zeroconf, ServiceBrowser, ServiceListener
zc = Zeroconf(interfaces=["127.0.0.1"])
found = []
class L(ServiceListener):
    def add_service(self, zc, type_, name):
        info = zc.get_service_info(type_, name, timeout=3000)
        if info is not None:
            found.append(info)
    def update_service(self, zc, type_, name): pass
    def remove_service(self, zc, type_, name): pass
ServiceBrowser(zc, "_kith-a2a._tcp.local.", L())
deadline = time.time() + 15
while not found and time.time() < deadline:
    time.sleep(0.1)
zc.close()
if not found:
    print("nothing found"); sys.exit(1)
for info in found:
    for k, v in sorted(info.properties.items()):
        print("%s=%s" % (k.decode(), (v or b"").decode()))
    print("port=%d" % info.port)
`
	out, err := exec.Command(python, "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("python3-zeroconf browse: %v\n%s", err, out)
	}
	t.Logf("python3-zeroconf saw:\n%s", out)
	if !strings.Contains(string(out), "peer="+a.ID().String()) || !strings.Contains(string(out), "profiles=echo") {
		t.Fatalf("python3-zeroconf did not see the peer ID and profiles in TXT:\n%s", out)
	}
}
