package discovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	kb "github.com/libp2p/go-libp2p-kbucket"
	p2pcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"github.com/libp2p/go-msgio"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
)

// checkNoLeaks registers, as the first cleanup (so it runs last, after the
// nodes and the mocknet have closed), a check that the test left no
// goroutines behind.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// mockKithHosts starts n mocknet hosts with kith (Ed25519) identities, all
// linked (able to dial each other) and none connected. The mocknet closes
// when the test ends.
func mockKithHosts(tb testing.TB, n int) (mocknet.Mocknet, []host.Host, []*crypto.Identity) {
	tb.Helper()
	mn := mocknet.New()
	tb.Cleanup(func() { _ = mn.Close() })
	hosts := make([]host.Host, n)
	ids := make([]*crypto.Identity, n)
	for i := range n {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			tb.Fatal(err)
		}
		h, err := mn.AddPeer(id.Libp2pKey(), ma.StringCast(fmt.Sprintf("/ip6/100::%x/tcp/4242", i+1)))
		if err != nil {
			tb.Fatal(err)
		}
		hosts[i], ids[i] = h, id
	}
	if err := mn.LinkAll(); err != nil {
		tb.Fatal(err)
	}
	return mn, hosts, ids
}

// kadNet is a network of DHT nodes on mocknet.
type kadNet struct {
	hosts    []host.Host
	dhts     []*DHT
	counters []*Counters
}

// newKadNet starts a DHT on each of n hosts, configured by cfg(i) (whose
// Counters is replaced by one per node).
func newKadNet(tb testing.TB, n int, cfg func(i int) DHTConfig) *kadNet {
	tb.Helper()
	_, hosts, _ := mockKithHosts(tb, n)
	k := &kadNet{hosts: hosts, dhts: make([]*DHT, n), counters: make([]*Counters, n)}
	for i, h := range hosts {
		c := cfg(i)
		k.counters[i] = &Counters{}
		c.Counters = k.counters[i]
		d, err := NewDHT(context.Background(), h, c)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if err := d.Close(); err != nil {
				tb.Error(err)
			}
		})
		k.dhts[i] = d
	}
	return k
}

func serverMode(int) DHTConfig { return DHTConfig{Mode: DHTModeServer} }

// bootstrapEach makes node i (i ≥ 1) bootstrap from exactly one peer, a
// random earlier node: the network is a random tree of introductions, and
// everything else each node knows it learns through the DHT.
func (k *kadNet) bootstrapEach(tb testing.TB, rng *rand.Rand) {
	tb.Helper()
	// Each node has its own deadline: a loaded machine (the race
	// detector, other packages' tests) slows every bootstrap, and one
	// shared deadline made the last nodes fail for the first ones' time.
	for i := 1; i < len(k.dhts); i++ {
		j := rng.IntN(i)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := k.dhts[i].Bootstrap(ctx, []peer.AddrInfo{addrInfo(k.hosts[j])})
		cancel()
		if err != nil {
			tb.Fatalf("node %d bootstrapping from node %d: %v", i, j, err)
		}
	}
}

func addrInfo(h host.Host) peer.AddrInfo { return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()} }

// holdsRecord reports whether node i itself stores a provider record for
// profile, so a lookup from it would need no network.
func (k *kadNet) holdsRecord(tb testing.TB, i int, profile string) bool {
	tb.Helper()
	provs, err := k.dhts[i].kad.ProviderStore().GetProviders(context.Background(), ProfileKey(profile).Hash())
	if err != nil {
		tb.Fatal(err)
	}
	return len(provs) > 0
}

// pickFinder picks a node other than provider that neither stores the
// record nor is connected to the provider, so that finding the provider
// takes a real lookup: one that is not connected if there is one, else
// one whose connection it closes. (A node that keeps its widest buckets
// connected, DHT.keep, would dial a closed connection again.)
func (k *kadNet) pickFinder(tb testing.TB, rng *rand.Rand, provider int, profile string) int {
	tb.Helper()
	prov := k.hosts[provider].ID()
	candidate := -1
	for _, i := range rng.Perm(len(k.dhts)) {
		if i == provider || k.holdsRecord(tb, i, profile) {
			continue
		}
		if k.hosts[i].Network().Connectedness(prov) != network.Connected {
			return i
		}
		if candidate < 0 {
			candidate = i
		}
	}
	if candidate < 0 {
		tb.Fatalf("every node stores the record of %q", profile)
	}
	if err := k.hosts[candidate].Network().ClosePeer(prov); err != nil {
		tb.Fatal(err)
	}
	return candidate
}

type lookupSample struct {
	advertise, find time.Duration
	holders         int // nodes that stored the provider record
}

// lookupCase is one provider and one finder of a fresh profile.
type lookupCase struct {
	profile          string
	provider, finder int
	sample           lookupSample
}

// prepareLookup has a random node advertise profile and picks a finder
// that must look it up over the network.
func (k *kadNet) prepareLookup(tb testing.TB, rng *rand.Rand, profile string) lookupCase {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := lookupCase{profile: profile, provider: rng.IntN(len(k.dhts))}
	start := time.Now()
	if err := k.dhts[c.provider].Advertise(ctx, []string{profile}); err != nil {
		tb.Fatalf("advertise %q: %v", profile, err)
	}
	c.sample.advertise = time.Since(start)
	// Advertise returns once the records are sent; with link latency they
	// are stored a little later. Wait for them (up to a bucket's worth of
	// holders, or until they stop coming), so that the finder is not one
	// and the holders are counted.
	for deadline, last, since := time.Now().Add(5*time.Second), -1, time.Now(); ; time.Sleep(5 * time.Millisecond) {
		c.sample.holders = 0
		for i := range k.dhts {
			if k.holdsRecord(tb, i, profile) {
				c.sample.holders++
			}
		}
		if c.sample.holders != last {
			last, since = c.sample.holders, time.Now()
		}
		if c.sample.holders > defaultFindLimit || time.Since(since) > 500*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	c.finder = k.pickFinder(tb, rng, c.provider, profile)
	if k.hosts[c.finder].Network().Connectedness(k.hosts[c.provider].ID()) == network.Connected {
		tb.Fatalf("finder %d still connected to provider %d", c.finder, c.provider)
	}
	return c
}

// find runs the lookup and checks that it found the provider.
func (k *kadNet) find(tb testing.TB, c *lookupCase) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	hints, err := k.dhts[c.finder].FindProviders(ctx, c.profile, 1)
	c.sample.find = time.Since(start)
	if err != nil {
		tb.Fatalf("find %q: %v", c.profile, err)
	}
	want := Hint{ID: k.hosts[c.provider].ID(), Source: SourceDHT, Profiles: []string{c.profile}}
	if len(hints) != 1 || hints[0].ID != want.ID || hints[0].Source != want.Source || !slices.Equal(hints[0].Profiles, want.Profiles) {
		tb.Fatalf("node %d looking for %q found %+v, want the provider, node %d: %+v", c.finder, c.profile, hints, c.provider, want)
	}
}

// findOnce has a random node advertise a fresh profile and another find it.
func (k *kadNet) findOnce(tb testing.TB, rng *rand.Rand, profile string) lookupSample {
	tb.Helper()
	c := k.prepareLookup(tb, rng, profile)
	k.find(tb, &c)
	return c.sample
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

// TestDHTFindProviderIn50Nodes: 50 in-process nodes, each introduced to
// exactly one other; a provider advertises a profile and a node that holds
// no record of it and is not connected to the provider finds it, 20 times
// with a fresh profile and fresh nodes each time.
//
// Every node is a DHT server: in "auto" a node serves only once AutoNAT
// finds it publicly reachable, and mocknet hosts run no AutoNAT, so they
// would all stay clients and nobody would answer queries.
func TestDHTFindProviderIn50Nodes(t *testing.T) {
	checkNoLeaks(t)
	const nodes, runs = 50, 20
	rng := rand.New(rand.NewPCG(1, 2))

	start := time.Now()
	k := newKadNet(t, nodes, serverMode)
	k.bootstrapEach(t, rng)
	t.Logf("DHT: %d nodes started and bootstrapped in %v", nodes, time.Since(start).Round(time.Millisecond))

	var finds, adverts []time.Duration
	holders := 0
	for run := range runs {
		s := k.findOnce(t, rng, fmt.Sprintf("llm-%d", run))
		finds = append(finds, s.find)
		adverts = append(adverts, s.advertise)
		holders += s.holders
	}
	slices.Sort(finds)
	slices.Sort(adverts)
	t.Logf("DHT time-to-provider over %d runs: p50=%v p99=%v (min %v, max %v)",
		runs, percentile(finds, 50), percentile(finds, 99), finds[0], finds[len(finds)-1])
	t.Logf("DHT advertise over %d runs: p50=%v p99=%v; records stored on %.1f nodes on average",
		runs, percentile(adverts, 50), percentile(adverts, 99), float64(holders)/runs)
	for i, c := range k.counters {
		if keys := c.Keys(); len(keys) > 0 {
			t.Errorf("node %d dropped input from honest nodes: %v", i, c.Snapshot())
		}
	}
}

// BenchmarkDHTFindProvider times FindProviders in a 50-node mocknet DHT,
// a fresh profile and provider each iteration; advertising and choosing
// the finder are not timed.
func BenchmarkDHTFindProvider(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	k := newKadNet(b, 50, serverMode)
	k.bootstrapEach(b, rng)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		c := k.prepareLookup(b, rng, fmt.Sprintf("bench-%d", i))
		b.StartTimer()
		k.find(b, &c)
	}
}

// ttlProviderStore is a provider store whose records expire after ttl: the
// 48-hour expiry of kad-dht's store, shrunk to fit in a test.
type ttlProviderStore struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]map[peer.ID]time.Time
}

func newTTLProviderStore(ttl time.Duration) *ttlProviderStore {
	return &ttlProviderStore{ttl: ttl, m: map[string]map[peer.ID]time.Time{}}
}

func (s *ttlProviderStore) AddProvider(_ context.Context, key []byte, prov peer.AddrInfo) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[string(key)] == nil {
		s.m[string(key)] = map[peer.ID]time.Time{}
	}
	s.m[string(key)][prov.ID] = time.Now()
	return nil
}

func (s *ttlProviderStore) GetProviders(_ context.Context, key []byte) ([]peer.AddrInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []peer.AddrInfo
	for p, at := range s.m[string(key)] {
		if time.Since(at) < s.ttl {
			out = append(out, peer.AddrInfo{ID: p})
		}
	}
	return out, nil
}

func (s *ttlProviderStore) Close() error { return nil }

// TestDHTReadvertise: provider records lapse after a TTL; a node running
// Run with a reprovide interval below the TTL stays findable long past it,
// while a profile advertised only once stops being found. The profile list
// changing makes Run advertise the new profile at once.
func TestDHTReadvertise(t *testing.T) {
	checkNoLeaks(t)
	const ttl = 3 * time.Second
	k := newKadNet(t, 8, func(int) DHTConfig {
		return DHTConfig{
			Mode:              DHTModeServer,
			ReprovideInterval: ttl / 6,
			profileCheck:      20 * time.Millisecond,
			kadOptions:        []kaddht.Option{kaddht.ProviderStore(newTTLProviderStore(ttl))},
		}
	})
	k.bootstrapEach(t, rand.New(rand.NewPCG(5, 6)))
	runner, once, finder := k.dhts[1], k.dhts[2], k.dhts[7]

	var profiles atomic.Pointer[[]string]
	profiles.Store(&[]string{"llm"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { runner.Run(ctx, func() []string { return *profiles.Load() }) })
	defer func() { cancel(); wg.Wait() }()

	if err := once.Advertise(ctx, []string{"vision"}); err != nil {
		t.Fatal(err)
	}
	found := func(profile string) bool {
		t.Helper()
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		defer fcancel()
		hints, err := finder.FindProviders(fctx, profile, 1)
		if err != nil {
			t.Fatalf("find %q: %v", profile, err)
		}
		return len(hints) == 1
	}
	labtest.WaitFor(t, 10*time.Second, "the running node's first advert", func() bool { return found("llm") })
	if !found("vision") {
		t.Fatal("a profile advertised once is not found before its records expire")
	}

	time.Sleep(2 * ttl)
	if found("vision") {
		t.Fatal("a profile advertised once is still found after its records expired: the test's TTL store does not expire records")
	}
	if !found("llm") {
		t.Fatal("a profile Run keeps advertising is not found after the records' TTL")
	}

	profiles.Store(&[]string{"llm", "audio"})
	labtest.WaitFor(t, 10*time.Second, "an advert of a profile added while running", func() bool { return found("audio") })
}

// TestDHTClientMode: a client-mode node finds and advertises through the
// servers, but answers no DHT queries: it registers no DHT protocol and no
// server has it in its routing table.
func TestDHTClientMode(t *testing.T) {
	checkNoLeaks(t)
	const client = 5
	k := newKadNet(t, 6, func(i int) DHTConfig {
		if i == client {
			return DHTConfig{Mode: DHTModeClient}
		}
		return DHTConfig{Mode: DHTModeServer}
	})
	k.bootstrapEach(t, rand.New(rand.NewPCG(7, 8)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The client learns of more servers than the one it was introduced to.
	if err := k.dhts[client].Bootstrap(ctx, []peer.AddrInfo{addrInfo(k.hosts[0])}); err != nil {
		t.Fatal(err)
	}

	if got := k.dhts[client].Mode(); got != DHTModeClient {
		t.Errorf("client Mode() = %q", got)
	}
	if got := k.dhts[0].Mode(); got != DHTModeServer {
		t.Errorf("server Mode() = %q", got)
	}
	clientID := k.hosts[client].ID()
	if slices.Contains(k.hosts[client].Mux().Protocols(), kadProtocol) {
		t.Errorf("client registers %s", kadProtocol)
	}
	connected := 0
	for i, d := range k.dhts[:client] {
		if k.hosts[i].Network().Connectedness(clientID) == network.Connected {
			connected++
		}
		if d.kad.RoutingTable().Find(clientID) != "" {
			t.Errorf("server %d has the client in its routing table", i)
		}
	}
	if connected == 0 {
		t.Fatal("the client is connected to no server: the test shows nothing")
	}
	// Asking the client directly fails: it does not speak the protocol.
	if s, err := k.hosts[0].NewStream(ctx, clientID, kadProtocol); err == nil {
		_ = s.Reset()
		t.Error("the client accepted a DHT stream")
	}

	// Yet it uses the DHT both ways.
	if err := k.dhts[client].Advertise(ctx, []string{"from-client"}); err != nil {
		t.Fatal(err)
	}
	hints, err := k.dhts[0].FindProviders(ctx, "from-client", 1)
	if err != nil || len(hints) != 1 || hints[0].ID != clientID {
		t.Fatalf("server looking for the client's profile: %v, %v", hints, err)
	}
	if err := k.dhts[3].Advertise(ctx, []string{"from-server"}); err != nil {
		t.Fatal(err)
	}
	hints, err = k.dhts[client].FindProviders(ctx, "from-server", 1)
	if err != nil || len(hints) != 1 || hints[0].ID != k.hosts[3].ID() {
		t.Fatalf("client looking for a server's profile: %v, %v", hints, err)
	}
}

// liarStore answers every provider lookup with bad records, then the real
// ones.
type liarStore struct {
	*ttlProviderStore
	bad []peer.AddrInfo
}

func (s *liarStore) GetProviders(ctx context.Context, key []byte) ([]peer.AddrInfo, error) {
	good, err := s.ttlProviderStore.GetProviders(ctx, key)
	return append(slices.Clone(s.bad), good...), err
}

// TestDHTDropsMalformedProviderRecords: a DHT server answers with provider
// records whose peer IDs are garbage or not Ed25519 keys; the finder drops
// and counts them and still finds the real provider.
func TestDHTDropsMalformedProviderRecords(t *testing.T) {
	checkNoLeaks(t)
	_, secpPub, err := p2pcrypto.GenerateSecp256k1Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	secpID, err := peer.IDFromPublicKey(secpPub)
	if err != nil {
		t.Fatal(err)
	}
	liar := &liarStore{
		ttlProviderStore: newTTLProviderStore(time.Hour),
		bad: []peer.AddrInfo{
			{ID: peer.ID("not a peer id")},
			{ID: secpID, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}},
		},
	}
	// Node 0 (the only node the others know) lies; node 1 provides; node 2
	// looks.
	k := newKadNet(t, 3, func(i int) DHTConfig {
		c := DHTConfig{Mode: DHTModeServer}
		if i == 0 {
			c.kadOptions = []kaddht.Option{kaddht.ProviderStore(liar)}
		}
		return c
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, i := range []int{1, 2} {
		if err := k.dhts[i].Bootstrap(ctx, []peer.AddrInfo{addrInfo(k.hosts[0])}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.dhts[1].Advertise(ctx, []string{"llm"}); err != nil {
		t.Fatal(err)
	}
	hints, err := k.dhts[2].FindProviders(ctx, "llm", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != 1 || hints[0].ID != k.hosts[1].ID() {
		t.Fatalf("found %v, want only the provider %s", hints, k.hosts[1].ID())
	}
	if got := k.counters[2].Get("dht/malformed"); got != uint64(len(liar.bad)) {
		t.Errorf("dht/malformed = %d, want %d (%v)", got, len(liar.bad), k.counters[2].Snapshot())
	}
}

func TestProviderHint(t *testing.T) {
	id := testPeer(t, 3)
	addr := ma.StringCast("/ip4/192.168.1.2/tcp/4001")
	h, err := providerHint(peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{addr, nil}}, "llm")
	if err != nil {
		t.Fatal(err)
	}
	if h.ID != id || h.Source != SourceDHT || !slices.Equal(h.Profiles, []string{"llm"}) || len(h.Addrs) != 1 || !h.Addrs[0].Equal(addr) {
		t.Errorf("hint %+v", h)
	}
	if h, err := providerHint(peer.AddrInfo{ID: id}, "llm"); err != nil || h.ID != id || len(h.Addrs) != 0 {
		t.Errorf("a record without addresses: %+v, %v", h, err)
	}
	many := make([]ma.Multiaddr, 100)
	for i := range many {
		many[i] = ma.StringCast(fmt.Sprintf("/ip4/10.0.0.1/tcp/%d", i+1))
	}
	if h, err := providerHint(peer.AddrInfo{ID: id, Addrs: many}, "llm"); err != nil || len(h.Addrs) != maxHintAddrs {
		t.Errorf("100 addresses: kept %d, %v", len(h.Addrs), err)
	}
	for _, bad := range []peer.ID{"", "garbage"} {
		if _, err := providerHint(peer.AddrInfo{ID: bad}, "llm"); err == nil {
			t.Errorf("peer ID %q accepted", bad)
		}
	}
}

func TestProfileKey(t *testing.T) {
	k := ProfileKey("llm")
	if k.Prefix().Codec != cid.Raw || k.Version() != 1 {
		t.Errorf("key %v: codec %x, version %d", k, k.Prefix().Codec, k.Version())
	}
	dec, err := multihash.Decode(k.Hash())
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte("kith/profile/llm"))
	if dec.Code != multihash.SHA2_256 || !bytes.Equal(dec.Digest, want[:]) {
		t.Errorf("key digest %x (code %x), want sha256 %x", dec.Digest, dec.Code, want)
	}
	if ProfileKey("llm2").Equals(k) {
		t.Error("two profiles share a key")
	}
}

func TestNewDHTConfig(t *testing.T) {
	_, hosts, _ := mockKithHosts(t, 1)
	for _, c := range []DHTConfig{
		{Mode: "off"},
		{Mode: "Server"},
		{ReprovideInterval: -time.Second},
		{ReprovideInterval: 48 * time.Hour},
	} {
		if d, err := NewDHT(context.Background(), hosts[0], c); !errors.Is(err, ErrDHTConfig) {
			if d != nil {
				_ = d.Close()
			}
			t.Errorf("%+v: got %v, want ErrDHTConfig", c, err)
		}
	}
	d, err := NewDHT(context.Background(), hosts[0], DHTConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// "auto" serves until AutoNAT finds the node private.
	if got := d.Mode(); got != DHTModeServer {
		t.Errorf("auto mode without reachability: Mode() = %q", got)
	}
	if _, err := d.FindProviders(context.Background(), "bad name", 1); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("find with a bad profile name: %v", err)
	}
	if err := d.Advertise(context.Background(), []string{"bad name"}); !errors.Is(err, protocol.ErrMalformed) {
		t.Errorf("advertise a bad profile name: %v", err)
	}
}

// TestDHTBootstrapUnreachable: Bootstrap from a peer that cannot be dialled
// says that the DHT has no peers.
func TestDHTBootstrapUnreachable(t *testing.T) {
	checkNoLeaks(t)
	mn, hosts, _ := mockKithHosts(t, 2)
	if err := mn.UnlinkPeers(hosts[0].ID(), hosts[1].ID()); err != nil {
		t.Fatal(err)
	}
	d, err := NewDHT(context.Background(), hosts[0], DHTConfig{Mode: DHTModeServer})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Bootstrap(ctx, []peer.AddrInfo{addrInfo(hosts[1])}); !errors.Is(err, ErrNoDHTPeers) {
		t.Fatalf("got %v, want ErrNoDHTPeers", err)
	}
	hints, err := d.FindProviders(ctx, "llm", 1)
	if err != nil || len(hints) != 0 {
		t.Fatalf("find with an empty routing table: %v, %v", hints, err)
	}
}

// TestDHTAdvertisesWhenFirstServerArrives: a node that starts Run before it
// knows any DHT server (a home lab where the hub boots later) advertises as
// soon as its routing table gains one, not a retry interval later; and in
// "auto" mode, with no reachability known, the nodes serve. How long the
// record took to be found is logged.
func TestDHTAdvertisesWhenFirstServerArrives(t *testing.T) {
	checkNoLeaks(t)
	k := newKadNet(t, 3, func(int) DHTConfig { return DHTConfig{Mode: DHTModeAuto} })
	provider, hub, finder := k.dhts[0], k.dhts[1], k.dhts[2]
	for i, d := range k.dhts {
		if got := d.Mode(); got != DHTModeServer {
			t.Fatalf("node %d in auto mode, reachability unknown: Mode() = %q, want server", i, got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { provider.Run(ctx, func() []string { return []string{"late"} }) })
	defer func() { cancel(); wg.Wait() }()

	time.Sleep(3 * routingTableCheck) // the first round finds nobody to put records on
	start := time.Now()
	for _, d := range []*DHT{provider, finder} {
		if err := d.Bootstrap(ctx, []peer.AddrInfo{{ID: hub.h.ID(), Addrs: hub.h.Addrs()}}); err != nil {
			t.Fatal(err)
		}
	}
	// Well before advertiseRetry, the round after a failure.
	labtest.WaitFor(t, advertiseRetry/2, "the provider's record, once it knows a server", func() bool {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		defer fcancel()
		hints, _ := finder.FindProviders(fctx, "late", 1)
		return len(hints) == 1 && hints[0].ID == provider.h.ID()
	})
	t.Logf("found %v after the provider's first server joined (retry interval %v)", time.Since(start).Round(time.Millisecond), advertiseRetry)
}

// TestFindProvidersAsksConnectedServers: a node whose routing table admits
// nobody, so that kad-dht's lookup has no peer to start from, still finds
// the provider through the DHT server it is connected to, which stores the
// record: FindProviders asks the connected servers closest to the key
// directly.
func TestFindProvidersAsksConnectedServers(t *testing.T) {
	checkNoLeaks(t)
	// Node 0 stores the record, node 1 provides, node 2 looks.
	k := newKadNet(t, 3, func(i int) DHTConfig {
		c := DHTConfig{Mode: DHTModeServer}
		if i == 2 {
			c.kadOptions = []kaddht.Option{kaddht.RoutingTableFilter(func(any, peer.ID) bool { return false })}
		}
		return c
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := k.dhts[1].Bootstrap(ctx, []peer.AddrInfo{addrInfo(k.hosts[0])}); err != nil {
		t.Fatal(err)
	}
	if err := k.dhts[1].Advertise(ctx, []string{"llm"}); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "node 0 to store the record", func() bool { return k.holdsRecord(t, 0, "llm") })
	connectServer(t, ctx, k.hosts[2], k.hosts[0])
	if n := k.dhts[2].kad.RoutingTable().Size(); n != 0 {
		t.Fatalf("the finder's routing table holds %d peers, want none", n)
	}

	ectx, events := routing.RegisterForQueryEvents(ctx)
	var asked []peer.ID
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if ev.Type == routing.SendingQuery {
				asked = append(asked, ev.ID)
			}
		}
	}()
	hints, err := k.dhts[2].FindProviders(ectx, "llm", 1)
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != 1 || hints[0].ID != k.hosts[1].ID() || hints[0].Source != SourceDHT {
		t.Fatalf("found %+v, want the provider %s from the DHT", hints, k.hosts[1].ID())
	}
	if !slices.Equal(asked, []peer.ID{k.hosts[0].ID()}) {
		t.Errorf("queries went to %v, want one, to the connected server %s", asked, k.hosts[0].ID())
	}
}

// TestFindProvidersBadAnswers: a connected server that answers the direct
// question with garbage, an answer about another key, a message too large
// to read, or not at all, gives no provider, is counted when its answer is
// bad, and holds nothing past the caller's context.
func TestFindProvidersBadAnswers(t *testing.T) {
	key := ProfileKey("llm").Hash()
	encode := func(m *dhtpb.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	provider := peer.AddrInfo{ID: testPeer(t, 7), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}}
	otherKey := dhtpb.NewMessage(dhtpb.Message_GET_PROVIDERS, ProfileKey("other").Hash(), 0)
	otherKey.ProviderPeers = dhtpb.RawPeerInfosToPBPeers([]peer.AddrInfo{provider})
	wrongType := dhtpb.NewMessage(dhtpb.Message_FIND_NODE, key, 0)
	wrongType.ProviderPeers = dhtpb.RawPeerInfosToPBPeers([]peer.AddrInfo{provider})
	for _, tc := range []struct {
		name    string
		answer  func(w msgio.Writer, s network.Stream) error
		counted bool
	}{
		{"garbage", func(w msgio.Writer, _ network.Stream) error { return w.WriteMsg([]byte{0xff, 0xff, 0xff}) }, true},
		{"another key", func(w msgio.Writer, _ network.Stream) error { return w.WriteMsg(encode(otherKey)) }, true},
		{"another type", func(w msgio.Writer, _ network.Stream) error { return w.WriteMsg(encode(wrongType)) }, true},
		{"too large", func(_ msgio.Writer, s network.Stream) error {
			_, err := s.Write(binary.AppendUvarint(nil, uint64(maxKadMessage+1)))
			return err
		}, true},
		{"silent", func(msgio.Writer, network.Stream) error { return nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkNoLeaks(t)
			_, hosts, _ := mockKithHosts(t, 2)
			liar, finder := hosts[0], hosts[1]
			liar.SetStreamHandler(kadProtocol, func(s network.Stream) {
				defer func() { _ = s.Close() }()
				if _, err := msgio.NewVarintReaderSize(s, maxKadMessage).ReadMsg(); err != nil {
					return
				}
				if err := tc.answer(msgio.NewVarintWriter(s), s); err != nil {
					t.Error(err)
				}
				// Hold the stream open, as a server that never answers.
				_, _ = io.Copy(io.Discard, s)
			})
			counters := &Counters{}
			d, err := NewDHT(context.Background(), finder, DHTConfig{
				Mode: DHTModeServer, Counters: counters,
				kadOptions: []kaddht.Option{kaddht.RoutingTableFilter(func(any, peer.ID) bool { return false })},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			connectServer(t, ctx, finder, liar)

			fctx, fcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer fcancel()
			hints, err := d.FindProviders(fctx, "llm", 1)
			if len(hints) != 0 {
				t.Fatalf("found %+v in a bad answer", hints)
			}
			if tc.counted && err != nil {
				t.Fatalf("a bad answer ended the lookup with %v, want it done with no provider", err)
			}
			if !tc.counted && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a silent server: err %v, want the caller's deadline", err)
			}
			want := uint64(0)
			if tc.counted {
				want = 1
			}
			if got := counters.Get("dht/malformed_answer"); got != want {
				t.Errorf("dht/malformed_answer = %d, want %d", got, want)
			}
		})
	}
}

// connectServer connects h to server and waits until identify has told h
// that server speaks the DHT's protocol.
func connectServer(t *testing.T, ctx context.Context, h, server host.Host) {
	t.Helper()
	if err := h.Connect(ctx, addrInfo(server)); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "identify", func() bool {
		p, err := h.Peerstore().FirstSupportedProtocol(server.ID(), kadProtocol)
		return err == nil && p != ""
	})
}

// TestDHTKeepsWidestBuckets: a routing-table peer of the two widest
// buckets that the other end disconnects is dialled again; one of a
// narrower bucket is not kept.
func TestDHTKeepsWidestBuckets(t *testing.T) {
	checkNoLeaks(t)
	// Hosts until node 0 has a peer in its widest buckets (cpl < 2) and
	// one in a narrower bucket: 1 in 4 random peers is the latter.
	var k *kadNet
	var wide, narrow int
	for try := 0; ; try++ {
		k = newKadNet(t, 6, serverMode)
		self := kb.ConvertPeerID(k.hosts[0].ID())
		wide, narrow = -1, -1
		for i := 1; i < len(k.hosts); i++ {
			if kb.CommonPrefixLen(self, kb.ConvertPeerID(k.hosts[i].ID())) < keptBuckets {
				wide = max(wide, i)
			} else {
				narrow = max(narrow, i)
			}
		}
		if wide > 0 && narrow > 0 {
			break
		}
		if try == 20 {
			t.Fatal("no mix of wide and narrow peers in 20 tries")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := k.dhts[0].Bootstrap(ctx, []peer.AddrInfo{addrInfo(k.hosts[wide]), addrInfo(k.hosts[narrow])}); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "both peers in the routing table", func() bool {
		return k.dhts[0].InRoutingTable(k.hosts[wide].ID()) && k.dhts[0].InRoutingTable(k.hosts[narrow].ID())
	})
	kept := k.dhts[0].keptPeers()
	if !slices.Contains(kept, k.hosts[wide].ID()) || slices.Contains(kept, k.hosts[narrow].ID()) {
		t.Fatalf("kept %v; want node %d (widest buckets) and not node %d", kept, wide, narrow)
	}

	// The other end trims the connection, as its connection manager
	// would; node 0 must open a new one (host 0 may still see the old one
	// for a moment, so connections are counted, not looked at). The first
	// time before Run starts (Run's first pass finds the peer gone), the
	// second while it runs (the disconnect wakes it).
	var opened atomic.Int32
	notifee := &network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		if c.RemotePeer() == k.hosts[wide].ID() {
			opened.Add(1)
		}
	}}
	k.hosts[0].Network().Notify(notifee)
	defer k.hosts[0].Network().StopNotify(notifee)
	if err := k.hosts[wide].Network().ClosePeer(k.hosts[0].ID()); err != nil {
		t.Fatal(err)
	}

	kctx, kcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		kcancel()
		wg.Wait()
	}()
	// Run keeps them, as on a node (no profiles to advertise).
	wg.Go(func() { k.dhts[0].Run(kctx, func() []string { return nil }) })
	labtest.WaitFor(t, 10*time.Second, "the kept peer connected again at start", func() bool {
		return opened.Load() > 0 && k.hosts[0].Network().Connectedness(k.hosts[wide].ID()) == network.Connected
	})
	before := opened.Load()
	if err := k.hosts[wide].Network().ClosePeer(k.hosts[0].ID()); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "the kept peer connected again", func() bool {
		return opened.Load() > before && k.hosts[0].Network().Connectedness(k.hosts[wide].ID()) == network.Connected
	})
}
