package node

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/goleak"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/node/config"
)

// serveZone answers from records over UDP on 127.0.0.1 (NXDOMAIN for
// anything else) until the test ends.
func serveZone(t *testing.T, records []string) string {
	t.Helper()
	var rrs []dns.RR
	for _, line := range records {
		rr, err := dns.NewRR(line)
		if err != nil {
			t.Fatal(err)
		}
		rrs = append(rrs, rr)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		exists := false
		for _, rr := range rrs {
			h := rr.Header()
			if dns.IsSubDomain(req.Question[0].Name, h.Name) {
				exists = true
			}
			if h.Name == req.Question[0].Name && h.Rrtype == req.Question[0].Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		if !exists {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started, done := make(chan struct{}), make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() {
		defer close(done)
		_ = srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
	return pc.LocalAddr().String()
}

func testIdentity(t *testing.T) peer.ID {
	t.Helper()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id.PeerID()
}

// hintLog collects what a sink receives.
type hintLog struct {
	mu    sync.Mutex
	hints []discovery.Hint
	got   chan struct{} // one token per hint, never blocking
}

func newHintLog() *hintLog { return &hintLog{got: make(chan struct{}, 1024)} }

func (l *hintLog) sink(_ context.Context, h discovery.Hint) {
	l.mu.Lock()
	l.hints = append(l.hints, h)
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
}

func (l *hintLog) wait(t *testing.T, n int) []discovery.Hint {
	t.Helper()
	for range n {
		select {
		case <-l.got:
		case <-time.After(30 * time.Second):
			t.Fatalf("fewer than %d hints arrived", n)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]discovery.Hint(nil), l.hints...)
}

// runDNSSD finds the node published under the domain, hands it to the
// sink, resolves again every interval, and stops with its context.
func TestRunDNSSD(t *testing.T) {
	// Registered first, so it runs after the DNS server's cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	provider := testIdentity(t)
	addr := ma.StringCast("/ip4/127.0.0.1/tcp/4001")
	records, err := discovery.ZoneRecords(discovery.Zone{Domain: "lab.test", TXT: discovery.TXT{Peer: provider, Profiles: []string{"echo"}, Addrs: []ma.Multiaddr{addr}}})
	if err != nil {
		t.Fatal(err)
	}
	server := serveZone(t, append(records, "lab.test. 300 IN SOA ns.lab.test. admin.lab.test. 1 3600 600 86400 300"))

	n := &Node{log: slog.New(slog.DiscardHandler)}
	cfg := config.Discovery{
		DNSSDDomains:  []string{"lab.test", "missing.test"},
		DNSSDResolver: server,
		DNSSDInterval: config.Duration(20 * time.Millisecond),
	}
	hl := newHintLog()
	counters := &discovery.Counters{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.runDNSSD(ctx, cfg, hl.sink, counters)
	}()
	hints := hl.wait(t, 3) // three rounds: the lookups repeat
	cancel()
	<-done
	for _, h := range hints {
		if h.ID != provider || h.Source != discovery.SourceDNSSD || len(h.Addrs) != 1 || !h.Addrs[0].Equal(addr) {
			t.Fatalf("hint %+v, want %s at %s from dnssd", h, provider, addr)
		}
	}
	// missing.test does not exist: each of its lookups is counted, and
	// nothing else is.
	if snap := counters.Snapshot(); len(snap) != 1 || snap["dnssd/no_such_domain"] == 0 {
		t.Errorf("dropped input: %v; want only dnssd/no_such_domain", snap)
	}
}

// A failed lookup is retried sooner than the interval, on the backoff
// schedule (10s, then 20s), the interval resumes after a success, and a
// node never hands itself to the sink. In a synctest bubble the real
// schedule runs in fake time: the waits are exact and the test takes no
// time.
func TestResolveDNSSDRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		self, other := testIdentity(t), testIdentity(t)
		start := time.Now()
		var mu sync.Mutex
		var calls []time.Duration // when each lookup ran, since start
		var hints []discovery.Hint
		lookup := func(ctx context.Context, domain string) ([]discovery.Hint, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, time.Since(start))
			if len(calls) <= 2 {
				return nil, discovery.ErrResolver
			}
			return []discovery.Hint{
				{ID: self, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}, Source: discovery.SourceDNSSD},
				{ID: other, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/2")}, Source: discovery.SourceDNSSD},
			}, nil
		}
		sink := func(_ context.Context, h discovery.Hint) {
			mu.Lock()
			defer mu.Unlock()
			hints = append(hints, h)
		}
		n := &Node{log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.resolveDNSSD(ctx, lookup, []string{"lab.test", "lab.test"}, time.Hour, dnssdRetry, self, sink)
		}()
		time.Sleep(2*time.Hour + time.Minute)
		cancel()
		<-done

		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{0, 10 * time.Second, 30 * time.Second, time.Hour + 30*time.Second, 2*time.Hour + 30*time.Second}
		if !slices.Equal(calls, want) {
			t.Errorf("lookups at %v, want %v (a domain named twice is looked up once)", calls, want)
		}
		if len(hints) != 3 || hints[0].ID != other {
			t.Errorf("hints %+v, want %s once per successful lookup, never %s", hints, other, self)
		}
	})
}

// A resolver address the config cannot mean leaves DNS-SD off without
// stopping anything else.
func TestRunDNSSDBadResolver(t *testing.T) {
	n := &Node{log: slog.New(slog.DiscardHandler)}
	// It returns at once, without ctx ending.
	n.runDNSSD(context.Background(), config.Discovery{DNSSDDomains: []string{"lab.test"}, DNSSDResolver: "no port"}, func(context.Context, discovery.Hint) {
		t.Error("hint from a disabled source")
	}, &discovery.Counters{})
}
