package config

import (
	"path/filepath"
	"time"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
)

// FileName is the name of the config file inside the node's home directory.
const FileName = "config.toml"

// Defaults that are not visible in Default() because they apply when a
// value is left at zero.
const (
	// DefaultSocketName is the API socket, inside the home directory, that
	// an empty api_socket means.
	DefaultSocketName = "kith.sock"
	// DefaultStoreDir is the database directory, inside the home
	// directory, that an empty store.path means.
	DefaultStoreDir = "data"
	// DefaultMaxBudgetTokens is a profile's max_budget_tokens when it is
	// left at 0.
	DefaultMaxBudgetTokens uint64 = 4096
)

// Config is the whole of config.toml. The zero value is not useful; start
// from Default() or Load.
type Config struct {
	// Listen lists the multiaddrs the libp2p host listens on.
	// Default: ["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"].
	// An empty list makes a node that only dials out.
	Listen []string `toml:"listen"`

	// Peers lists static peers the node connects to at start, each a full
	// multiaddr ending in /p2p/<peer id>. Default: none.
	Peers []string `toml:"peers"`

	// APISocket is the unix socket of the local control API (mode 0600).
	// Default: "", which means <home>/kith.sock; a relative path is relative
	// to <home>. See SocketPath.
	APISocket string `toml:"api_socket"`

	// LogLevel is the lowest level logged: "debug", "info", "warn" or
	// "error". Default: "info".
	LogLevel LogLevel `toml:"log_level"`

	// LogFormat is how log records are written to stderr: "text"
	// (key=value) or "json" (one object a line). Default: "text".
	LogFormat LogFormat `toml:"log_format"`

	// Store configures the database ([store]).
	Store Store `toml:"store"`

	// Limits bounds what peers may cost this node ([limits]).
	Limits Limits `toml:"limits"`

	// Policy says which peers may connect and ask ([policy]).
	Policy Policy `toml:"policy"`

	// Contexts bounds the conversation state this node keeps ([contexts]).
	Contexts Contexts `toml:"contexts"`

	// GPU says how this node counts its VRAM ([gpu]).
	GPU GPU `toml:"gpu"`

	// Discovery says how this node finds peers ([discovery]).
	Discovery Discovery `toml:"discovery"`

	// NAT says how this node gets through NAT routers ([nat]).
	NAT NAT `toml:"nat"`

	// API is the HTTP listener of the REST API and the A2A gateway ([api]).
	API API `toml:"api"`

	// Profiles are the kinds of work this node offers ([[profiles]]).
	// Default: one profile "echo" with executor "echo". A file with no
	// profiles key keeps that default; "profiles = []" offers nothing.
	Profiles []Profile `toml:"profiles"`
}

// Store is the [store] table.
type Store struct {
	// Durable syncs every write to disk before it is acknowledged, so
	// acknowledged state survives a power loss. false is faster and may lose
	// the last writes in a crash, never corrupt older ones. Default: true.
	Durable bool `toml:"durable"`

	// Path is the database directory. Default: "", which means <home>/data;
	// a relative path is relative to <home>. See StorePath.
	Path string `toml:"path"`

	// DBLogLevel is the lowest level of the database's own log (badger's
	// compactions, value log GC, ...), apart from the node's log_level so
	// that debugging kith does not drown in it: "debug", "info", "warn" or
	// "error". Default: "warn". (Not "log_level": that name here is the
	// usual slip of a top-level key below [store], which stays an error.)
	DBLogLevel LogLevel `toml:"db_log_level"`
}

// Policy is the [policy] table.
type Policy struct {
	// Mode is "open": any peer that is not denied may connect; or
	// "allowlist": only peers allowed with "kith peers allow" may connect
	// (others are refused during the handshake). Denied peers are refused
	// in both. Default: "open".
	Mode PolicyMode `toml:"mode"`

	// QueryTrust is the lowest trust level ("untrusted", "verified",
	// "trusted") whose capability queries are answered. Default:
	// "untrusted". Which level may use a profile is the profile's
	// min_trust.
	QueryTrust Trust `toml:"query_trust"`
}

// GPU is the [gpu] table.
type GPU struct {
	// DeclaredVRAMMiB, when above 0, is the VRAM this node offers, declared
	// by hand instead of read from NVML (for non-NVIDIA GPUs, or to offer
	// less than the card has). Default: 0, which means ask NVML; a node
	// without an NVIDIA GPU then refuses profiles that need VRAM.
	DeclaredVRAMMiB uint64 `toml:"declared_vram_mib"`

	// HeadroomMiB is VRAM kept free on every device, never leased.
	// Default: 512.
	HeadroomMiB uint64 `toml:"headroom_mib"`

	// ReofferPreempted makes this node, as a requester, offer a delegation
	// that a provider preempted to another provider of the profile.
	// Default: true.
	ReofferPreempted bool `toml:"reoffer_preempted"`
}

// Discovery is the [discovery] table. Every source only yields hints: a
// peer's profiles count once its signed capability assertion verifies.
type Discovery struct {
	// MDNS announces this node as _kith-a2a._tcp on the local network and
	// connects to the peers it hears. Default: true.
	MDNS bool `toml:"mdns"`

	// DNSSDDomains are domains whose _kith-a2a._tcp SRV/TXT records and
	// _dnsaddr TXT records name peers (see "kith dnssd records").
	// Default: none.
	DNSSDDomains []string `toml:"dnssd_domains"`

	// DNSSDResolver is the DNS server ("host:port") asked for those
	// records, for split-horizon set-ups. Default: "", the system resolver
	// (/etc/resolv.conf).
	DNSSDResolver string `toml:"dnssd_resolver"`

	// DNSSDInterval is how often the DNS-SD domains are resolved again.
	// Default: "5m".
	DNSSDInterval Duration `toml:"dnssd_interval"`

	// DHT is the private Kademlia DHT's mode: "auto" (server unless
	// AutoNAT finds the node private, so every node of a LAN serves),
	// "server", "client", or "off". Default: "auto".
	DHT DHTMode `toml:"dht"`

	// Gossip publishes this node's signed capability advert with its load
	// on the topic of each profile it offers (/kith/capabilities/1/<hash>)
	// and listens on the topics of the profiles it offers or requests
	// (docs/scale.md). Default: true.
	Gossip bool `toml:"gossip"`

	// AdvertInterval is how often the full advert is published when
	// nothing changes. Default: "2m"; from "1s" to "2m30s" (half the
	// five-minute life of a signed capability assertion, so one lost
	// advert does not make the node vanish).
	AdvertInterval Duration `toml:"advert_interval"`

	// LoadInterval is the least time between two adverts: a meaningful
	// load change (becoming full or free, or a quarter of the slots) is
	// published once this long has passed since the last advert. Peers
	// drop adverts that come less than a second apart. Default: "10s"; at
	// least "1s".
	LoadInterval Duration `toml:"load_interval"`

	// AdvertPushMax is how many providers of one profile push adverts on
	// its topic (the first in a rank all nodes agree on); past it, the
	// others stay silent there and requesters find them through the DHT
	// and ask them at request time. 0 means no limit. Default: 8.
	AdvertPushMax int `toml:"advert_push_max"`

	// LegacyTopic also listens on /kith/capabilities/1, the one topic of
	// kith before per-profile topics, and publishes the full advert there
	// every advert_interval: turn it on while nodes of earlier versions
	// remain in the mesh. Default: false.
	LegacyTopic bool `toml:"legacy_topic"`

	// ConnsLow and ConnsHigh are the connection manager's water marks:
	// past ConnsHigh connections it closes the least useful down to
	// ConnsLow, DHT-only peers first. Static peers, relays and peers this
	// node delegates with are kept, and so are the DHT's peers of the two
	// widest buckets of its routing table (about 40 in a large mesh),
	// which it dials again when the other end closes them: lookups start
	// there. Default: 64 and 192.
	ConnsLow  int `toml:"conns_low"`
	ConnsHigh int `toml:"conns_high"`
}

// NAT is the [nat] table.
type NAT struct {
	// Relays are circuit relay v2 nodes this node reserves a slot on when
	// it is not publicly reachable, full multiaddrs ending in /p2p/<id>.
	// Default: none.
	Relays []string `toml:"relays"`

	// RelayBootDelay is how long after start the node waits before taking
	// a relay reservation when its reachability is still unknown. Default:
	// "2s".
	RelayBootDelay Duration `toml:"relay_boot_delay"`

	// PortMapping asks the router for a port mapping over UPnP or NAT-PMP.
	// Default: true.
	PortMapping bool `toml:"port_mapping"`

	// Relay runs the circuit relay v2 service, for a publicly reachable
	// node (a small VPS). In policy mode "allowlist" it relays only for
	// allowed peers. Default: false.
	Relay bool `toml:"relay"`

	// RelayMaxReservations is how many peers may hold a reservation at
	// once. Default: 128.
	RelayMaxReservations int `toml:"relay_max_reservations"`

	// RelayMaxCircuits is how many relayed connections one peer may have
	// open at once. Default: 16.
	RelayMaxCircuits int `toml:"relay_max_circuits"`

	// RelayCircuitDuration ends one relayed connection after this long.
	// Default: "10m".
	RelayCircuitDuration Duration `toml:"relay_circuit_duration"`

	// RelayCircuitMiB ends one relayed connection after this much data in
	// each direction, in MiB. Default: 64.
	RelayCircuitMiB int `toml:"relay_circuit_mib"`
}

// Limits is the [limits] table.
type Limits struct {
	// MaxFrameBytes caps one protocol frame this node accepts, in bytes;
	// larger frames end the stream before they are read. Tasks and results
	// larger than a frame travel in chunks of 1 MiB, so this bounds memory
	// per read, not what a delegation carries (64 MiB). Default: 4194304
	// (4 MiB); at least 2097152 (2 MiB), at most 67108864 (64 MiB).
	MaxFrameBytes int `toml:"max_frame_bytes"`

	// StreamIdleTimeout closes a stream on which nothing arrived for this
	// long. Default: "30s".
	StreamIdleTimeout Duration `toml:"stream_idle_timeout"`

	// MaxRemoteConcurrent is how many delegations from other peers run at
	// once (the remote pool); local work is not counted. Default: 4; at
	// least 1.
	MaxRemoteConcurrent int `toml:"max_remote_concurrent"`

	// UntrustedRemoteSlots is how many remote-pool slots untrusted peers
	// (strangers found by discovery) may hold together; the rest are kept
	// for peers you verified or trusted, however many identities a
	// stranger makes. Default: 1; 0 to max_remote_concurrent.
	UntrustedRemoteSlots int `toml:"untrusted_remote_slots"`

	// DefaultTimeout is a delegation's timeout when neither the offer nor
	// the profile sets one. Default: "5m"; at most max_timeout.
	DefaultTimeout Duration `toml:"default_timeout"`

	// MaxTimeout caps every delegation's timeout, whatever the offer asks.
	// Default: "1h".
	MaxTimeout Duration `toml:"max_timeout"`

	// DefaultHopLimit is the hop limit of offers this node starts: how many
	// providers a task may pass through. Default: 4; 1 to 16.
	DefaultHopLimit int `toml:"default_hop_limit"`

	// OffersPerSecond is the rate of delegation offers one peer may make;
	// faster offers are rejected rate_limited. Default: 10.
	OffersPerSecond float64 `toml:"offers_per_second"`

	// OfferBurst is how many offers one peer may make at once above
	// OffersPerSecond. Default: 20.
	OfferBurst int `toml:"offer_burst"`

	// QueriesPerSecond is the rate of capability queries one peer may make;
	// faster ones go unanswered. Default: 5.
	QueriesPerSecond float64 `toml:"queries_per_second"`

	// QueryBurst is how many queries one peer may make at once above
	// QueriesPerSecond. Default: 10.
	QueryBurst int `toml:"query_burst"`

	// MaxStreamsPerPeer caps one peer's open streams to this node (libp2p
	// resource manager). A kith requester that meets it waits for one of
	// its own streams to close before it opens another (its offers queue;
	// none fails for it), so with more remote slots per peer than this,
	// a peer runs only about this many tasks here at once. Default: 64.
	MaxStreamsPerPeer int `toml:"max_streams_per_peer"`

	// MaxConnsPerPeer caps one peer's connections to this node. Default: 8.
	MaxConnsPerPeer int `toml:"max_conns_per_peer"`

	// MaxMemoryPerPeerMiB caps the memory one peer's connections and
	// streams may reserve, in MiB. Default: 64.
	MaxMemoryPerPeerMiB int `toml:"max_memory_per_peer_mib"`

	// EnvelopeMaxSkew is how far in the future a message's issued_at may be
	// (peers' clocks differ). Default: "30s"; at most "10m", because the
	// replay cache must remember message IDs that much longer.
	EnvelopeMaxSkew Duration `toml:"envelope_max_skew"`

	// ReplayCacheEntries caps the replay cache: the message IDs of
	// envelopes accepted and not yet expired (an envelope lives at most
	// 5 minutes plus the skew). When it is full, new streams are refused
	// until entries expire: evicting one would let its message be
	// replayed. Default: 131072 (crypto.DefaultMaxReplayEntries, about
	// 20 MiB); at least 1.
	ReplayCacheEntries int `toml:"replay_cache_entries"`
}

// Profile is one [[profiles]] entry: a named kind of work this node offers
// to itself and to its peers. The fields after VRAMMiB belong to one
// executor each; setting one for another executor is an error.
type Profile struct {
	// Name identifies the profile in offers, adverts and the CLI. Required;
	// [a-z0-9][a-z0-9._-]{0,63}; unique within the file.
	Name string `toml:"name"`

	// Description says what the profile does, for peers and A2A agent
	// cards. Default: "". At most 1024 bytes.
	Description string `toml:"description"`

	// Skills are free-form tags peers can search for. Default: none. At
	// most 64, each 1 to 64 bytes.
	Skills []string `toml:"skills"`

	// Executor runs the work: "echo", "exec", "openai" or "a2a". Required.
	Executor Executor `toml:"executor"`

	// MaxBudgetTokens is the largest token budget an offer may name; offers
	// above it are rejected budget_too_high. Default: 0, which means 4096.
	// See EffectiveMaxBudgetTokens.
	MaxBudgetTokens uint64 `toml:"max_budget_tokens"`

	// Timeout is the profile's delegation timeout when the offer sets none.
	// Default: "0s", which means limits.default_timeout; at most
	// limits.max_timeout. See EffectiveTimeout.
	Timeout Duration `toml:"timeout"`

	// VRAMMiB is the GPU memory one delegation of this profile leases, in
	// MiB. Default: 0 (needs no GPU).
	VRAMMiB uint64 `toml:"vram_mib"`

	// MinTrust is the lowest trust level ("untrusted", "verified",
	// "trusted") a peer needs to use this profile; others are rejected
	// not_allowed. Local work is always allowed. Default: "", which means
	// "untrusted" for executor "echo" and "verified" for every other
	// executor (see Trust). A peer becomes verified when the user adds or
	// allows it ("kith peers add", "kith peers allow"); peers found by
	// discovery stay untrusted.
	MinTrust Trust `toml:"min_trust"`

	// Command is the exec executor's argv: the task arrives on stdin, the
	// result is read from stdout. Required for exec, with a non-empty first
	// element; no shell is involved.
	Command []string `toml:"command"`

	// Dir is the exec executor's working directory. Default: "", the
	// daemon's working directory; otherwise an absolute path.
	Dir string `toml:"dir"`

	// Env adds "KEY=VALUE" entries to the exec executor's environment.
	// Default: none.
	Env []string `toml:"env"`

	// URL is the openai executor's base URL, http or https, e.g.
	// "http://127.0.0.1:11434/v1" (Ollama); "/chat/completions" is appended.
	// For the a2a executor it is the agent's base URL, where its card is
	// found at /.well-known/agent-card.json. Required for openai and a2a.
	URL string `toml:"url"`

	// Model is the model the openai executor asks for. Required for openai.
	Model string `toml:"model"`

	// APIKeyEnv names the environment variable that holds the openai
	// executor's API key, or the a2a executor's bearer token, so the secret
	// never sits in this file. Default: "", none sent.
	APIKeyEnv string `toml:"api_key_env"`

	// System is the openai executor's system prompt. Default: "", none.
	System string `toml:"system"`
}

// Default returns the built-in configuration. Each call returns fresh
// slices, so the caller may modify the result.
func Default() Config {
	return Config{
		Listen: []string{
			"/ip4/0.0.0.0/tcp/4001",
			"/ip4/0.0.0.0/udp/4001/quic-v1",
		},
		LogLevel:  LogInfo,
		LogFormat: LogFormatText,
		Store: Store{
			Durable:    true,
			DBLogLevel: LogWarn,
		},
		Limits: Limits{
			MaxFrameBytes:        protocol.DefaultMaxFrame,
			StreamIdleTimeout:    Duration(30 * time.Second),
			MaxRemoteConcurrent:  delegation.DefaultMaxRemoteConcurrent,
			UntrustedRemoteSlots: 1,
			DefaultTimeout:       Duration(delegation.DefaultTimeout),
			MaxTimeout:           Duration(delegation.DefaultMaxTimeout),
			DefaultHopLimit:      delegation.DefaultHopLimit,
			EnvelopeMaxSkew:      Duration(30 * time.Second),
			ReplayCacheEntries:   crypto.DefaultMaxReplayEntries,
			OffersPerSecond:      10,
			OfferBurst:           20,
			QueriesPerSecond:     5,
			QueryBurst:           10,
			MaxStreamsPerPeer:    64,
			MaxConnsPerPeer:      8,
			MaxMemoryPerPeerMiB:  64,
		},
		Policy:   Policy{Mode: PolicyOpen, QueryTrust: TrustUntrusted},
		Contexts: defaultContexts(),
		API:      API{MaxBodyBytes: DefaultMaxBodyBytes},
		GPU:      GPU{HeadroomMiB: 512, ReofferPreempted: true},
		Discovery: Discovery{
			MDNS:           true,
			DHT:            DHTAuto,
			Gossip:         true,
			DNSSDInterval:  Duration(5 * time.Minute),
			AdvertInterval: Duration(2 * time.Minute),
			LoadInterval:   Duration(10 * time.Second),
			AdvertPushMax:  8,
			ConnsLow:       64,
			ConnsHigh:      192,
		},
		NAT: NAT{
			RelayBootDelay:       Duration(2 * time.Second),
			PortMapping:          true,
			RelayMaxReservations: 128,
			RelayMaxCircuits:     16,
			RelayCircuitDuration: Duration(10 * time.Minute),
			RelayCircuitMiB:      64,
		},
		Profiles: []Profile{{
			Name:        "echo",
			Description: "Echoes the task back; for demos and tests",
			Executor:    ExecutorEcho,
		}},
	}
}

// SocketPath returns the API socket's path for a node whose home directory
// is home.
func (c Config) SocketPath(home string) string {
	return underHome(home, c.APISocket, DefaultSocketName)
}

// StorePath returns the database directory for a node whose home directory
// is home.
func (c Config) StorePath(home string) string {
	return underHome(home, c.Store.Path, DefaultStoreDir)
}

func underHome(home, p, def string) string {
	switch {
	case p == "":
		return filepath.Join(home, def)
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	default:
		return filepath.Join(home, p)
	}
}

// Profile returns the profile named name.
func (c Config) Profile(name string) (Profile, bool) {
	for _, p := range c.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return Profile{}, false
}

// EffectiveMaxBudgetTokens is MaxBudgetTokens, or DefaultMaxBudgetTokens
// when that is 0.
func (p Profile) EffectiveMaxBudgetTokens() uint64 {
	if p.MaxBudgetTokens == 0 {
		return DefaultMaxBudgetTokens
	}
	return p.MaxBudgetTokens
}

// EffectiveTimeout is the profile's Timeout, or l.DefaultTimeout when that
// is 0, capped at l.MaxTimeout.
func (p Profile) EffectiveTimeout(l Limits) time.Duration {
	d := p.Timeout.Std()
	if d <= 0 {
		d = l.DefaultTimeout.Std()
	}
	if m := l.MaxTimeout.Std(); m > 0 && d > m {
		d = m
	}
	return d
}

// Trust returns the profile's MinTrust as a level. Left empty, it is the
// default: untrusted for echo, which costs nothing, and verified for every
// other executor, because they spend real resources (a command, a model, an
// API key, another agent) that a stranger on the same LAN, found by mDNS,
// must not get by default.
func (p Profile) Trust() protocol.TrustLevel {
	if p.MinTrust == TrustDefault {
		if p.Executor == ExecutorEcho {
			return protocol.Untrusted
		}
		return protocol.Verified
	}
	return p.MinTrust.Level()
}
