package config

import (
	"encoding"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/protocol"
)

// Bounds that Validate enforces.
const (
	MinFrameBytes   = 2 << 20 // a chunk (protocol.ChunkSize) and its framing fit
	MaxFrameBytes   = 64 << 20
	MinHopLimit     = 1
	MaxHopLimit     = 16
	MaxEnvelopeSkew = 10 * time.Minute
)

// profileNameRe is stricter than protocol.CheckProfileName: profile names
// also become file names, DHT keys and URL path segments.
var profileNameRe = regexp.MustCompile(fmt.Sprintf(`^[a-z0-9][a-z0-9._-]{0,%d}$`, protocol.MaxProfileNameLen-1))

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks c against every rule and reports every problem at once:
// the result is nil or an errors.Join of *KeyError, each naming its key
// (e.g. `profiles[1].command: required when executor = "exec"`). It does
// no I/O: commands, directories and environment variables are checked when
// they are used.
func (c Config) Validate() error { return join(c.validate()) }

func (c Config) validate() problems {
	var ps problems
	c.validateNetwork(&ps)
	// Decoding refuses an enum the file spells wrong; these catch a value
	// that code (a flag, a test) set out of range.
	enumValue(&ps, "log_level", c.LogLevel)
	enumValue(&ps, "log_format", c.LogFormat)
	enumValue(&ps, "store.db_log_level", c.Store.DBLogLevel)
	c.Limits.validate(&ps)
	c.Policy.validate(&ps)
	c.Contexts.validate(&ps)
	c.Discovery.validate(&ps)
	c.NAT.validate(&ps)
	c.API.validate(&ps)
	c.validateProfiles(&ps)
	return ps
}

func (c Config) validateNetwork(ps *problems) {
	seen := make(map[string]int, len(c.Listen))
	for i, s := range c.Listen {
		key := fmt.Sprintf("listen[%d]", i)
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			ps.add(key, "%q is not a multiaddr: %v", s, err)
			continue
		}
		// Two equal addresses would fail at start with "address in use".
		if j, dup := seen[a.String()]; dup {
			ps.add(key, "%q repeats listen[%d]", s, j)
			continue
		}
		seen[a.String()] = i
	}
	for i, s := range c.Peers {
		key := fmt.Sprintf("peers[%d]", i)
		if _, err := ma.NewMultiaddr(s); err != nil {
			ps.add(key, "%q is not a multiaddr: %v", s, err)
			continue
		}
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			ps.add(key, "%q must end in /p2p/<peer id>: %v", s, err)
			continue
		}
		if len(ai.Addrs) == 0 {
			ps.add(key, "%q has no address to dial; want e.g. \"/ip4/192.168.1.20/tcp/4001/p2p/%s\"", s, ai.ID)
		}
	}
}

func (l Limits) validate(ps *problems) {
	if l.MaxFrameBytes < MinFrameBytes || l.MaxFrameBytes > MaxFrameBytes {
		ps.add("limits.max_frame_bytes", "%d is out of range; want %d (2 MiB) to %d (64 MiB)", l.MaxFrameBytes, MinFrameBytes, MaxFrameBytes)
	}
	positive(ps, "limits.stream_idle_timeout", l.StreamIdleTimeout)
	if l.MaxRemoteConcurrent >= 1 && (l.UntrustedRemoteSlots < 0 || l.UntrustedRemoteSlots > l.MaxRemoteConcurrent) {
		ps.add("limits.untrusted_remote_slots", "%d; want 0 to max_remote_concurrent (%d)", l.UntrustedRemoteSlots, l.MaxRemoteConcurrent)
	}
	if l.MaxRemoteConcurrent < 1 {
		ps.add("limits.max_remote_concurrent", "%d; want at least 1", l.MaxRemoteConcurrent)
	}
	defOK := positive(ps, "limits.default_timeout", l.DefaultTimeout)
	maxOK := positive(ps, "limits.max_timeout", l.MaxTimeout)
	if defOK && maxOK && l.DefaultTimeout > l.MaxTimeout {
		ps.add("limits.default_timeout", "%s is above limits.max_timeout (%s)", l.DefaultTimeout, l.MaxTimeout)
	}
	if l.DefaultHopLimit < MinHopLimit || l.DefaultHopLimit > MaxHopLimit {
		ps.add("limits.default_hop_limit", "%d is out of range; want %d to %d", l.DefaultHopLimit, MinHopLimit, MaxHopLimit)
	}
	if positive(ps, "limits.envelope_max_skew", l.EnvelopeMaxSkew) && l.EnvelopeMaxSkew.Std() > MaxEnvelopeSkew {
		ps.add("limits.envelope_max_skew", "%s is above %s; a larger skew widens the replay window", l.EnvelopeMaxSkew, Duration(MaxEnvelopeSkew))
	}
	l.rateLimits(ps)
}

func (p Policy) validate(ps *problems) {
	enumValue(ps, "policy.mode", p.Mode)
	if p.QueryTrust == TrustDefault {
		ps.add("policy.query_trust", "\"\"; want %s", trustLevels.allowed())
	} else {
		enumValue(ps, "policy.query_trust", p.QueryTrust)
	}
}

// enumValue reports an enum value that has no name.
func enumValue(ps *problems, key string, v encoding.TextMarshaler) {
	if _, err := v.MarshalText(); err != nil {
		ps.add(key, "%v", err)
	}
}

func (d Discovery) validate(ps *problems) {
	for i, dom := range d.DNSSDDomains {
		if !validDomain(dom) {
			ps.add(fmt.Sprintf("discovery.dnssd_domains[%d]", i), "%q is not a domain name such as \"lab.example.org\"", dom)
		}
	}
	if d.DNSSDResolver != "" {
		if _, port, err := net.SplitHostPort(d.DNSSDResolver); err != nil || port == "" {
			ps.add("discovery.dnssd_resolver", "%q; want host:port, e.g. \"192.168.1.1:53\"", d.DNSSDResolver)
		}
	}
	positive(ps, "discovery.dnssd_interval", d.DNSSDInterval)
	enumValue(ps, "discovery.dht", d.DHT)
	if positive(ps, "discovery.advert_interval", d.AdvertInterval) && (d.AdvertInterval.Std() < time.Second || d.AdvertInterval.Std() > MaxAdvertInterval) {
		ps.add("discovery.advert_interval", "%s; want from \"1s\" to %q", d.AdvertInterval, Duration(MaxAdvertInterval))
	}
	if positive(ps, "discovery.load_interval", d.LoadInterval) && d.LoadInterval.Std() < time.Second {
		ps.add("discovery.load_interval", "%s; want at least \"1s\"", d.LoadInterval)
	}
	if d.AdvertPushMax < 0 {
		ps.add("discovery.advert_push_max", "%d; want 0 (no limit) or more", d.AdvertPushMax)
	}
	if d.ConnsLow < 1 || d.ConnsHigh < d.ConnsLow {
		ps.add("discovery.conns_low", "%d and conns_high %d; want 1 <= conns_low <= conns_high", d.ConnsLow, d.ConnsHigh)
	}
}

// MaxAdvertInterval is the longest discovery.advert_interval: half the
// five-minute life of a signed capability assertion.
const MaxAdvertInterval = 150 * time.Second

// validDomain accepts a DNS name of letters, digits, hyphens and
// underscores in dot-separated labels of 1 to 63 bytes, 253 at most, with
// an optional final dot.
func validDomain(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, r := range l {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func (n NAT) validate(ps *problems) {
	for i, s := range n.Relays {
		key := fmt.Sprintf("nat.relays[%d]", i)
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			ps.add(key, "%q must be a multiaddr ending in /p2p/<peer id>: %v", s, err)
			continue
		}
		if len(ai.Addrs) == 0 {
			ps.add(key, "%q has no address to dial", s)
		}
	}
	if n.RelayBootDelay < 0 {
		ps.add("nat.relay_boot_delay", "%s; want 0 or a positive duration", n.RelayBootDelay)
	}
	positive(ps, "nat.relay_circuit_duration", n.RelayCircuitDuration)
	for _, v := range []struct {
		key string
		n   int
	}{
		{"nat.relay_max_reservations", n.RelayMaxReservations}, {"nat.relay_max_circuits", n.RelayMaxCircuits},
		{"nat.relay_circuit_mib", n.RelayCircuitMiB},
	} {
		if v.n < 1 {
			ps.add(v.key, "%d; want at least 1", v.n)
		}
	}
}

// rateLimits checks the per-peer limits of [limits].
func (l Limits) rateLimits(ps *problems) {
	if l.OffersPerSecond <= 0 {
		ps.add("limits.offers_per_second", "%g; want a positive rate", l.OffersPerSecond)
	}
	if l.QueriesPerSecond <= 0 {
		ps.add("limits.queries_per_second", "%g; want a positive rate", l.QueriesPerSecond)
	}
	for _, v := range []struct {
		key string
		n   int
	}{
		{"limits.offer_burst", l.OfferBurst}, {"limits.query_burst", l.QueryBurst},
		{"limits.max_streams_per_peer", l.MaxStreamsPerPeer}, {"limits.max_conns_per_peer", l.MaxConnsPerPeer},
		{"limits.max_memory_per_peer_mib", l.MaxMemoryPerPeerMiB},
		{"limits.replay_cache_entries", l.ReplayCacheEntries},
	} {
		if v.n < 1 {
			ps.add(v.key, "%d; want at least 1", v.n)
		}
	}
}

func positive(ps *problems, key string, d Duration) bool {
	if d <= 0 {
		ps.add(key, "%s; want a positive duration such as \"30s\"", d)
		return false
	}
	return true
}

func (c Config) validateProfiles(ps *problems) {
	if len(c.Profiles) > protocol.MaxProfiles {
		ps.add("profiles", "%d profiles; at most %d can be advertised", len(c.Profiles), protocol.MaxProfiles)
	}
	seen := make(map[string]int, len(c.Profiles))
	for i, p := range c.Profiles {
		key := fmt.Sprintf("profiles[%d]", i)
		p.validate(ps, key, c.Limits)
		if p.Name == "" {
			continue
		}
		if j, dup := seen[p.Name]; dup {
			ps.add(key+".name", "%q is already the name of profiles[%d]", p.Name, j)
			continue
		}
		seen[p.Name] = i
	}
}

func (p Profile) validate(ps *problems, key string, l Limits) {
	enumValue(ps, key+".min_trust", p.MinTrust)
	switch {
	case p.Name == "":
		ps.add(key+".name", "required")
	case !profileNameRe.MatchString(p.Name):
		ps.add(key+".name", "%q is not a profile name; want 1 to %d of a-z, 0-9, '.', '_', '-', starting with a letter or digit", p.Name, protocol.MaxProfileNameLen)
	}
	if len(p.Description) > protocol.MaxDescriptionLen {
		ps.add(key+".description", "%d bytes; at most %d", len(p.Description), protocol.MaxDescriptionLen)
	}
	if len(p.Skills) > protocol.MaxSkills {
		ps.add(key+".skills", "%d skills; at most %d", len(p.Skills), protocol.MaxSkills)
	}
	for j, s := range p.Skills {
		if s == "" || len(s) > protocol.MaxSkillLen {
			ps.add(fmt.Sprintf("%s.skills[%d]", key, j), "%q; want 1 to %d bytes", s, protocol.MaxSkillLen)
		}
	}
	if p.Timeout < 0 {
		ps.add(key+".timeout", "%s is negative; 0 means limits.default_timeout", p.Timeout)
	} else if l.MaxTimeout > 0 && p.Timeout > l.MaxTimeout {
		ps.add(key+".timeout", "%s is above limits.max_timeout (%s)", p.Timeout, l.MaxTimeout)
	}

	switch p.Executor {
	case "":
		ps.add(key+".executor", "required; want %s", executors.allowed())
		return
	case ExecutorEcho:
	case ExecutorExec:
		p.validateExec(ps, key)
	case ExecutorOpenAI:
		p.validateOpenAI(ps, key)
	case ExecutorA2A:
		p.validateA2A(ps, key)
	default:
		// The executor-specific keys cannot be judged against an executor
		// that does not exist.
		ps.add(key+".executor", "unknown executor %q; want %s", p.Executor, executors.allowed())
		return
	}
	for _, f := range p.executorFields() {
		if f.set && !slices.Contains(f.owners, p.Executor) {
			ps.add(key+"."+f.key, "only for executor = %s; this profile's executor is %q", quoteExecutors(f.owners), p.Executor)
		}
	}
}

func (p Profile) validateExec(ps *problems, key string) {
	switch {
	case len(p.Command) == 0:
		ps.add(key+".command", "required when executor = %q", ExecutorExec)
	case p.Command[0] == "":
		ps.add(key+".command", "the program, command[0], is empty")
	}
	if p.Dir != "" && !filepath.IsAbs(p.Dir) {
		ps.add(key+".dir", "%q is not an absolute path", p.Dir)
	}
	seen := make(map[string]int, len(p.Env))
	for j, kv := range p.Env {
		ekey := fmt.Sprintf("%s.env[%d]", key, j)
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !envNameRe.MatchString(name) {
			ps.add(ekey, "%q; want \"NAME=value\" with NAME of letters, digits and '_'", kv)
			continue
		}
		if k, dup := seen[name]; dup {
			ps.add(ekey, "%s is already set by env[%d]", name, k)
			continue
		}
		seen[name] = j
	}
}

func (p Profile) validateOpenAI(ps *problems, key string) {
	if p.URL == "" {
		ps.add(key+".url", "required when executor = %q; e.g. \"http://127.0.0.1:11434/v1\"", ExecutorOpenAI)
	} else if msg := checkBaseURL(p.URL); msg != "" {
		ps.add(key+".url", "%q %s", p.URL, msg)
	}
	if p.Model == "" {
		ps.add(key+".model", "required when executor = %q", ExecutorOpenAI)
	}
	if p.APIKeyEnv != "" && !envNameRe.MatchString(p.APIKeyEnv) {
		ps.add(key+".api_key_env", "%q is not an environment variable name; put the key itself in the environment, not here", p.APIKeyEnv)
	}
}

func checkBaseURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "is not an http or https URL"
	case u.Host == "":
		return "has no host"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "is a base URL and may not have a query or fragment"
	}
	return ""
}

type executorField struct {
	key    string
	owners []Executor
	set    bool
}

// executorFields lists the keys that belong to one executor each. A zero
// value counts as unset: decoding cannot tell `dir = ""` from no dir, and
// either way it changes nothing.
func (p Profile) executorFields() []executorField {
	return []executorField{
		{"command", []Executor{ExecutorExec}, len(p.Command) > 0},
		{"dir", []Executor{ExecutorExec}, p.Dir != ""},
		{"env", []Executor{ExecutorExec}, len(p.Env) > 0},
		{"url", []Executor{ExecutorOpenAI, ExecutorA2A}, p.URL != ""},
		{"model", []Executor{ExecutorOpenAI}, p.Model != ""},
		{"api_key_env", []Executor{ExecutorOpenAI, ExecutorA2A}, p.APIKeyEnv != ""},
		{"system", []Executor{ExecutorOpenAI}, p.System != ""},
	}
}

func quoteExecutors(es []Executor) string {
	q := make([]string, len(es))
	for i, e := range es {
		q[i] = fmt.Sprintf("%q", e)
	}
	return strings.Join(q, " or ")
}
