package main

// The NAT lab of TESTING.md ("NAT traversal: two home labs and a relay, in
// namespaces"), built from real network namespaces, veth pairs, a bridge
// and nftables NAT routers. Every namespace carries a random suffix, so a
// crashed earlier run cannot collide with this one, and every one is
// removed at cleanup, pass or fail.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
)

// Addresses of the lab. 11.0.0.0/24 looks public to go-libp2p (it hole
// punches only from public addresses) and never leaves the namespaces.
const (
	labRelayIP = "11.0.0.10"
	labNATAIP  = "11.0.0.1"
	labNATBIP  = "11.0.0.2"
)

// Masquerade flavours of the lab's NAT routers.
const (
	// natPortPreserving maps a LAN host's port to the same router port
	// whatever the destination (endpoint-independent): hole punching works.
	natPortPreserving = ""
	// natFullyRandom picks a new router port for every destination
	// (endpoint-dependent, "symmetric"): hole punching cannot work.
	natFullyRandom = "random,fully-random"
)

// needNetnsRoot skips t unless it runs as root with iproute2 and nftables;
// under KITH_NETNS_REQUIRED=1 (set by .ci/run) the skip is a failure.
func needNetnsRoot(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("the NAT lab needs %s: run as root with iproute2 and nftables installed: "+
		"KITH_NAT_TEST=1 go test -race -run TestNAT -v ./cmd/kith", strings.Join(missing, ", "))
	labtest.Lacking(t, labtest.NetnsRequired, msg)
}

// natLab is one instance of the topology:
//
//	hostA 192.168.1.2 ── natA 11.0.0.1 ─┐
//	                                     ├─ inet (bridge) ── relay 11.0.0.10
//	hostB 192.168.2.2 ── natB 11.0.0.2 ─┘
type natLab struct {
	t      *testing.T
	suffix string
	made   []string // namespaces created, for cleanup
}

// Roles of the lab's namespaces.
const (
	nsInet  = "inet"
	nsRelay = "relay"
	nsNATA  = "natA"
	nsNATB  = "natB"
	nsHostA = "hostA"
	nsHostB = "hostB"
)

// emptyLab is a lab with a fresh name suffix and no namespaces yet; every
// namespace added to it is deleted at cleanup, pass or fail.
func emptyLab(t *testing.T) *natLab {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	l := &natLab{t: t, suffix: hex.EncodeToString(b)}
	t.Cleanup(l.remove)
	return l
}

// addNS creates the namespace of role, with its loopback up, and returns
// its name.
func (l *natLab) addNS(role string) string {
	ns := l.ns(role)
	l.ip("netns", "add", ns)
	l.made = append(l.made, ns)
	l.ip("-n", ns, "link", "set", "dev", "lo", "up")
	return ns
}

// newNATLab builds the lab with both routers masquerading the given way
// (natPortPreserving or natFullyRandom).
func newNATLab(t *testing.T, masquerade string) *natLab {
	t.Helper()
	l := emptyLab(t)
	for _, role := range []string{nsInet, nsRelay, nsNATA, nsNATB, nsHostA, nsHostB} {
		l.addNS(role)
	}
	inet := l.ns(nsInet)
	l.ip("-n", inet, "link", "add", "br0", "type", "bridge")
	l.ip("-n", inet, "link", "set", "dev", "br0", "up")
	// plug puts a namespace on the internet bridge with address ip.
	plug := func(role, dev, port, ip string) {
		l.ip("-n", l.ns(role), "link", "add", dev, "type", "veth", "peer", "name", port, "netns", inet)
		l.ip("-n", l.ns(role), "addr", "add", ip+"/24", "dev", dev)
		l.ip("-n", l.ns(role), "link", "set", "dev", dev, "up")
		l.ip("-n", inet, "link", "set", "dev", port, "master", "br0")
		l.ip("-n", inet, "link", "set", "dev", port, "up")
	}
	plug(nsRelay, "eth0", "vrelay", labRelayIP)
	plug(nsNATA, "wan", "vnatA", labNATAIP)
	plug(nsNATB, "wan", "vnatB", labNATBIP)
	// home puts a host behind a router on the LAN 192.168.<n>.0/24.
	home := func(router, host, lanNet string) {
		r, h := l.ns(router), l.ns(host)
		l.ip("-n", r, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", h)
		l.ip("-n", r, "addr", "add", lanNet+".1/24", "dev", "lan")
		l.ip("-n", r, "link", "set", "dev", "lan", "up")
		l.ip("-n", h, "addr", "add", lanNet+".2/24", "dev", "eth0")
		l.ip("-n", h, "link", "set", "dev", "eth0", "up")
		l.ip("-n", h, "route", "add", "default", "via", lanNet+".1")
		l.exec(r, nil, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
		l.exec(r, []byte(routerRules(masquerade)), "nft", "-f", "-")
	}
	home(nsNATA, nsHostA, "192.168.1")
	home(nsNATB, nsHostB, "192.168.2")
	return l
}

// routerRules is a home router's nftables ruleset: masquerade what leaves
// on the WAN; forward replies and what the LAN starts; and drop new
// connections arriving on the WAN for the router itself (without that, a
// peer's early hole punch packet creates a conntrack entry that clashes
// with the outbound masquerade, and punching fails).
func routerRules(masquerade string) string {
	return fmt.Sprintf(`table ip kith_nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname "wan" masquerade %s
	}
}
table inet kith_filter {
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "lan" oifname "wan" accept
	}
	chain input {
		type filter hook input priority filter; policy accept;
		iifname "wan" ct state new drop
	}
}
`, masquerade)
}

// ns is the namespace name of a role in this lab.
func (l *natLab) ns(role string) string { return "kith-" + role + "-" + l.suffix }

// ip runs the ip command on the host.
func (l *natLab) ip(args ...string) { l.t.Helper(); l.run(nil, "ip", args...) }

// exec runs a command inside a namespace of the lab.
func (l *natLab) exec(ns string, stdin []byte, name string, args ...string) {
	l.t.Helper()
	l.run(stdin, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func (l *natLab) run(stdin []byte, name string, args ...string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// remove kills whatever still runs in the lab's namespaces (only this
// test starts processes there; the daemons are normally killed by PID
// before) and deletes the namespaces.
func (l *natLab) remove() {
	for _, ns := range l.made {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("remove namespace %s: %v\n%s", ns, err, out)
		}
	}
}

// labNode initializes a kith home under dir listening on listen, with
// extraConfig merged into the config.toml that init wrote.
func labNode(t *testing.T, dir, name, listen, extraConfig string) *testNode {
	t.Helper()
	return initNode(t, dir, name, []string{listen}, extraConfig)
}

// startIn runs "kith daemon" inside namespace ns and waits until it
// answers on its socket (a unix socket is a file, so the test and the CLI
// reach it from the host's namespace). "ip netns exec" execs the daemon,
// so the PID that cleanup kills is the daemon's.
func (n *testNode) startIn(ns string) {
	n.t.Helper()
	info := n.launch("kith daemon in namespace "+ns, "ip", "netns", "exec", ns, kithBin, "--home", n.home, "daemon")
	n.addrs = info.Addrs
}

// blockUDP makes a router of the lab drop every UDP packet it forwards, both
// ways: a home network whose router (or ISP) blocks UDP, so QUIC cannot
// leave it.
func (l *natLab) blockUDP(router string) {
	l.t.Helper()
	l.exec(l.ns(router), nil, "nft", "insert", "rule", "inet", "kith_filter", "forward", "meta", "l4proto", "udp", "drop")
}
