package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"

	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
)

// nsdServer is a real authoritative DNS server (NLnet Labs' nsd) serving
// one zone on 127.0.0.1.
type nsdServer struct {
	addr string // 127.0.0.1:port
	log  string
}

// startNSD checks zoneFile with nsd-checkzone, runs nsd in the foreground
// for zone on a free loopback port, and waits until it answers the zone's
// SOA. The process is killed by PID at cleanup.
func startNSD(t *testing.T, dir, zone, zoneFile string) *nsdServer {
	t.Helper()
	nsd := labtest.Tool(t, labtest.NetnsRequired, "nsd", "nsd")
	if out, err := exec.Command(labtest.Tool(t, labtest.NetnsRequired, "nsd-checkzone", "nsd"), zone, zoneFile).CombinedOutput(); err != nil {
		b, _ := os.ReadFile(zoneFile)
		t.Fatalf("nsd-checkzone rejects the zone: %v\n%s\nzone file:\n%s", err, out, b)
	}
	// The port is free when chosen, and could be taken before nsd binds
	// it; then nsd exits and another port is tried.
	var lastErr string
	for range 3 {
		port := freeUDPTCPPort(t)
		s := &nsdServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: filepath.Join(dir, "nsd.log")}
		conf := filepath.Join(dir, "nsd.conf")
		q := strconv.Quote
		confText := strings.Join([]string{
			"server:",
			"  ip-address: 127.0.0.1@" + strconv.Itoa(port),
			"  do-ip6: no",
			"  server-count: 1",
			"  verbosity: 2",
			`  username: ""`,
			`  chroot: ""`,
			`  database: ""`,
			"  zonesdir: " + q(dir),
			"  pidfile: " + q(filepath.Join(dir, "nsd.pid")),
			"  zonelistfile: " + q(filepath.Join(dir, "zone.list")),
			"  xfrdfile: " + q(filepath.Join(dir, "xfrd.state")),
			"  xfrdir: " + q(dir),
			"  logfile: " + q(s.log),
			"remote-control:",
			"  control-enable: no",
			"zone:",
			"  name: " + zone,
			"  zonefile: " + q(zoneFile),
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(confText), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(labtest.Tool(t, labtest.NetnsRequired, "nsd-checkconf", "nsd"), conf).CombinedOutput(); err != nil {
			t.Fatalf("nsd-checkconf rejects the config: %v\n%s\n%s", err, out, confText)
		}
		cmd := exec.Command(nsd, "-d", "-c", conf)
		logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Start()
		logf.Close()
		if err != nil {
			t.Fatalf("start nsd: %v", err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // harmless once it has exited
			<-exited
		})
		if s.waitSOA(t, zone, exited) {
			return s
		}
		b, _ := os.ReadFile(s.log)
		lastErr = string(b)
	}
	t.Fatalf("nsd never answered; its log:\n%s", lastErr)
	return nil
}

// waitSOA polls the server until it answers zone's SOA authoritatively;
// false if nsd exits first.
func (s *nsdServer) waitSOA(t *testing.T, zone string, exited <-chan struct{}) bool {
	t.Helper()
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(zone), dns.TypeSOA)
	deadline := time.Now().Add(startWait)
	for {
		select {
		case <-exited:
			return false
		default:
		}
		m, _, err := c.Exchange(q, s.addr)
		if err == nil && m.Rcode == dns.RcodeSuccess && m.Authoritative && len(m.Answer) == 1 {
			return true
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.log)
			t.Fatalf("nsd at %s gave no SOA for %s in %v (last: %v %v); its log:\n%s", s.addr, zone, startWait, m, err, b)
		}
		time.Sleep(pollEvery)
	}
}

// freeUDPTCPPort returns a loopback port that was free for both UDP and
// TCP a moment ago.
func freeUDPTCPPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		pc.Close()
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return 0
}

// prependConfig puts top-level keys at the head of a node's config.toml,
// above its first [table] (init writes them commented out).
func (n *testNode) prependConfig(lines string) {
	n.t.Helper()
	path := filepath.Join(n.home, "config.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := os.WriteFile(path, append([]byte(lines+"\n"), b...), 0o600); err != nil {
		n.t.Fatal(err)
	}
}

// A node configured with nothing but a domain finds, through a real
// authoritative DNS server (nsd) serving the records "kith dnssd records"
// printed for another node, that node, verifies it and delegates to it.
func TestDNSSDDaemonFindsPublishedNode(t *testing.T) {
	labtest.Tool(t, labtest.NetnsRequired, "nsd", "nsd")
	dir := testDir(t)
	// lab-echo is a profile only the provider has (both have the default
	// echo), so the requester must delegate over the network: a local
	// profile of the name would win.
	a := newNode(t, dir, "a", "[[profiles]]\nname = \"lab-echo\"\nexecutor = \"echo\"\n")
	a.start()

	// The records, for a node whose public IP is 127.0.0.1.
	r := a.kith("dnssd", "records", "--domain", "lab.test", "--ip", "127.0.0.1")
	r.mustSucceed(t)
	records := r.stdout
	tcpPort := ""
	for _, addr := range a.addrs {
		if !strings.Contains(records, `"dnsaddr=`+addr+`"`) {
			t.Errorf("the records lack the _dnsaddr string of %s:\n%s", addr, records)
		}
		if strings.Contains(addr, "/tcp/") {
			tcpPort = strings.Split(addr, "/")[4]
		}
	}
	label := discovery.DefaultLabel(mustDecode(t, a.id))
	for _, want := range []string{
		"_kith-a2a._tcp.lab.test.\t300\tIN\tPTR\t" + label + "._kith-a2a._tcp.lab.test.\n",
		label + "._kith-a2a._tcp.lab.test.\t300\tIN\tSRV\t0 0 " + tcpPort + " " + label + ".lab.test.\n",
		label + "._kith-a2a._tcp.lab.test.\t300\tIN\tTXT\t\"peer=" + a.id + "\" \"profiles=echo,lab-echo\"\n",
		label + ".lab.test.\t300\tIN\tA\t127.0.0.1\n",
	} {
		if !strings.Contains(records, want) {
			t.Errorf("the records lack %q:\n%s", want, records)
		}
	}
	if !strings.HasPrefix(records, ";") {
		t.Errorf("the records do not open with a ';' comment:\n%s", records)
	}
	if t.Failed() {
		t.FailNow()
	}
	// Without --ip, a node listening only on loopback is warned about it.
	r = a.kith("dnssd", "records", "--domain", "lab.test")
	r.mustSucceed(t)
	if !strings.Contains(r.stderr, "loopback") || !strings.Contains(r.stdout, "/ip4/127.0.0.1/tcp/"+tcpPort+"/p2p/"+a.id) {
		t.Errorf("loopback-only records without --ip: %v", r)
	}

	// The zone: SOA and NS, then exactly what the command printed.
	nsdDir := filepath.Join(dir, "nsd")
	if err := os.Mkdir(nsdDir, 0o700); err != nil {
		t.Fatal(err)
	}
	zoneFile := filepath.Join(nsdDir, "lab.test.zone")
	zoneText := "$ORIGIN lab.test.\n$TTL 300\n" +
		"@ IN SOA ns.lab.test. hostmaster.lab.test. 1 3600 600 86400 300\n" +
		"@ IN NS ns.lab.test.\n" +
		"ns IN A 127.0.0.1\n" + records
	if err := os.WriteFile(zoneFile, []byte(zoneText), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := startNSD(t, nsdDir, "lab.test", zoneFile)

	// What nsd serves reads back, through kith's resolver, as node a.
	res, err := discovery.NewDNSSD(discovery.DNSSDConfig{Resolver: ns.addr})
	if err != nil {
		t.Fatal(err)
	}
	hints, err := res.Lookup(t.Context(), "lab.test")
	if err != nil {
		t.Fatalf("lookup against nsd: %v", err)
	}
	if len(hints) != 1 || hints[0].ID.String() != a.id || !slices.Equal(hints[0].Profiles, []string{"echo", "lab-echo"}) {
		t.Fatalf("lookup against nsd: %+v, want node a (%s) with profile lab-echo", hints, a.id)
	}
	var gotAddrs []string
	for _, x := range hints[0].Addrs {
		gotAddrs = append(gotAddrs, x.String()+"/p2p/"+a.id)
	}
	slices.Sort(gotAddrs)
	if want := slices.Sorted(slices.Values(a.addrs)); !slices.Equal(gotAddrs, want) {
		t.Fatalf("lookup against nsd: addresses %v, want %v", gotAddrs, want)
	}

	// Node b knows nothing but the domain and the DNS server.
	b := newNode(t, dir, "b", fmt.Sprintf("[discovery]\nmdns = false\ndnssd_domains = [\"lab.test\"]\ndnssd_resolver = %q\n\n[nat]\nport_mapping = false\n", ns.addr))
	b.prependConfig(`log_level = "debug"`)
	b.start()

	labtest.WaitFor(t, stateWait, "node b resolves lab.test and finds node a (is runDNSSD wired into the node's discovery?)", func() bool {
		log, _ := os.ReadFile(b.log)
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, `msg="dnssd hint"`) && strings.Contains(line, " peer="+a.id+" ") {
				return true
			}
		}
		return false
	})
	var found api.DiscoveredPeer
	labtest.WaitFor(t, stateWait, "node b verifies node a's lab-echo profile", func() bool {
		r := b.kith("discover", "--json")
		r.mustSucceed(t)
		var d api.Discovery
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("kith discover --json: %v\n%s", err, r.stdout)
		}
		for _, p := range d.Peers {
			if p.ID == a.id && slices.Contains(p.Profiles, "lab-echo") {
				found = p
				return true
			}
		}
		return false
	})
	if !slices.Contains(found.Sources, "dnssd") {
		t.Fatalf("kith discover: node a's sources %v lack dnssd", found.Sources)
	}

	r = b.kith("delegate", "--profile", "lab-echo", "--budget", "100", "hello")
	r.mustSucceed(t)
	if got := strings.TrimSpace(r.stdout); got != "hello" {
		t.Fatalf("delegate printed %q, want hello; %v", got, r)
	}
	d := showJSON(t, b, delegationID(t, r))
	if d.Peer != a.id || !d.Remote || d.State.String() != "completed" {
		t.Fatalf("the delegation ran at %q (remote %v, %s), want node a %s", d.Peer, d.Remote, d.State, a.id)
	}

	r = b.kith("peers", "ls")
	r.mustSucceed(t)
	var row []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == a.id {
			row = f
		}
	}
	if row == nil || !slices.Contains(strings.Split(row[4], ","), "dnssd") {
		t.Fatalf("kith peers ls does not show node a with source dnssd:\n%s", r.stdout)
	}
}

func mustDecode(t *testing.T, s string) peer.ID {
	t.Helper()
	id, err := peer.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
