package config

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/kithmesh/kith/protocol"
)

// DefaultFile returns the config.toml that "kith init" writes: every key,
// each with a one-line explanation, set or commented out with its default,
// and commented examples of an exec and an openai profile. It loads back to
// Default() with Listen set to listen (to Default().Listen when listen is
// empty). The values come from Default(), so the file cannot drift from it.
func DefaultFile(listen []string) []byte {
	d := Default()
	if len(listen) > 0 {
		d.Listen = append([]string(nil), listen...)
	}
	var w fileWriter

	w.line("# kith configuration: $KITH_HOME/config.toml, written by \"kith init\".")
	w.line("#")
	w.line("# A commented-out key takes the default shown with it. Unknown keys are")
	w.line("# errors. Command-line flags override this file. To check the file without")
	w.line("# starting the node, run: kith daemon --check")
	w.line("#")
	w.line("# Top-level keys go above the first [table] header: TOML puts every key")
	w.line("# below a header into that table.")
	w.blank()

	w.comment("Multiaddrs to listen on. An empty list makes a node that only dials out.")
	w.set("listen", tomlList(d.Listen))
	w.blank()
	w.comment("Static peers to connect to at start: full multiaddrs ending in")
	w.comment("/p2p/<peer id>, e.g. \"/ip4/192.168.1.20/tcp/4001/p2p/12D3KooW...\".")
	w.show("peers", tomlArray(d.Peers))
	w.blank()
	w.comment("Unix socket of the local control API (mode 0600). \"\" means")
	w.comment("<home>/" + DefaultSocketName + "; a relative path is relative to <home>.")
	w.show("api_socket", tomlString(d.APISocket))
	w.blank()
	w.comment("Lowest level logged: \"debug\", \"info\", \"warn\" or \"error\".")
	w.show("log_level", tomlString(d.LogLevel.String()))
	w.comment("How log records are written: \"text\" (key=value) or \"json\" (one object a line).")
	w.show("log_format", tomlString(d.LogFormat.String()))
	w.blank()

	w.line("[store]")
	w.comment("Sync every write to disk before acknowledging it, so acknowledged state")
	w.comment("survives a power loss. false is faster; a crash may lose the last writes.")
	w.show("durable", fmt.Sprint(d.Store.Durable))
	w.comment("Database directory. \"\" means <home>/" + DefaultStoreDir + "; a relative path is relative")
	w.comment("to <home>.")
	w.show("path", tomlString(d.Store.Path))
	w.comment("Lowest level of the database's own log (badger), apart from log_level:")
	w.comment("\"debug\", \"info\", \"warn\" or \"error\".")
	w.show("db_log_level", tomlString(d.Store.DBLogLevel.String()))
	w.blank()

	l := d.Limits
	w.line("[limits]")
	w.comment("Largest protocol frame this node accepts, in bytes: 2 MiB to 64 MiB.")
	w.comment("Tasks and results of up to 64 MiB travel in 1 MiB chunks whatever this is.")
	w.show("max_frame_bytes", fmt.Sprint(l.MaxFrameBytes))
	w.comment("Close a stream on which nothing arrived for this long.")
	w.show("stream_idle_timeout", tomlString(l.StreamIdleTimeout.String()))
	w.comment("Delegations from other peers that run at once; local work is not counted.")
	w.show("max_remote_concurrent", fmt.Sprint(l.MaxRemoteConcurrent))
	w.comment("Of those, slots that untrusted peers (strangers) may hold together;")
	w.comment("the rest stay for peers you verified or trusted. 0 to max_remote_concurrent.")
	w.show("untrusted_remote_slots", fmt.Sprint(l.UntrustedRemoteSlots))
	w.comment("A delegation's timeout when neither the offer nor its profile sets one.")
	w.show("default_timeout", tomlString(l.DefaultTimeout.String()))
	w.comment("Upper bound on every delegation's timeout, whatever the offer asks.")
	w.show("max_timeout", tomlString(l.MaxTimeout.String()))
	w.comment("Hop limit of offers this node starts: how many providers a task may")
	w.comment(fmt.Sprintf("pass through, %d to %d.", MinHopLimit, MaxHopLimit))
	w.show("default_hop_limit", fmt.Sprint(l.DefaultHopLimit))
	w.comment("How far ahead of this node's clock a peer's message may be dated;")
	w.comment(fmt.Sprintf("at most %q.", Duration(MaxEnvelopeSkew)))
	w.show("envelope_max_skew", tomlString(l.EnvelopeMaxSkew.String()))
	w.comment("Message IDs the replay cache holds (each for an envelope's life, minutes).")
	w.comment("When full, new streams are refused until entries expire, never evicted.")
	w.show("replay_cache_entries", fmt.Sprint(l.ReplayCacheEntries))
	w.comment("Delegation offers one peer may make per second, and at once above that;")
	w.comment("faster offers are rejected rate_limited.")
	w.show("offers_per_second", fmt.Sprint(l.OffersPerSecond))
	w.show("offer_burst", fmt.Sprint(l.OfferBurst))
	w.comment("Capability queries one peer may make per second, and at once above that.")
	w.show("queries_per_second", fmt.Sprint(l.QueriesPerSecond))
	w.show("query_burst", fmt.Sprint(l.QueryBurst))
	w.comment("What one peer may hold open on this node: streams, connections, and memory")
	w.comment("in MiB (libp2p's resource manager).")
	w.show("max_streams_per_peer", fmt.Sprint(l.MaxStreamsPerPeer))
	w.show("max_conns_per_peer", fmt.Sprint(l.MaxConnsPerPeer))
	w.show("max_memory_per_peer_mib", fmt.Sprint(l.MaxMemoryPerPeerMiB))
	w.blank()

	w.line("[policy]")
	w.comment("\"open\": any peer that is not denied may connect. \"allowlist\": only peers")
	w.comment("allowed with \"kith peers allow ID\" may connect. Denied peers never may.")
	w.show("mode", tomlString(d.Policy.Mode.String()))
	w.comment("Lowest trust level whose capability queries are answered: \"untrusted\",")
	w.comment("\"verified\" or \"trusted\" (set with \"kith peers trust ID LEVEL\").")
	w.show("query_trust", tomlString(d.Policy.QueryTrust.String()))
	w.blank()

	w.contexts(d.Contexts)

	w.line("[gpu]")
	w.comment("VRAM this node offers, in MiB, declared by hand; 0 reads it from NVML (a node")
	w.comment("without an NVIDIA GPU then refuses profiles that set vram_mib).")
	w.show("declared_vram_mib", fmt.Sprint(d.GPU.DeclaredVRAMMiB))
	w.comment("VRAM kept free on every device, never leased to delegations.")
	w.show("headroom_mib", fmt.Sprint(d.GPU.HeadroomMiB))
	w.comment("When a provider preempts a delegation of ours, offer it to another provider.")
	w.show("reoffer_preempted", fmt.Sprint(d.GPU.ReofferPreempted))
	w.blank()

	ds := d.Discovery
	w.line("[discovery]")
	w.comment("Announce this node as _kith-a2a._tcp on the LAN over mDNS and connect to the")
	w.comment("peers heard there.")
	w.show("mdns", fmt.Sprint(ds.MDNS))
	w.comment("Domains whose DNS-SD records name peers; \"kith dnssd records --domain D\"")
	w.comment("prints the records to publish for this node.")
	w.show("dnssd_domains", tomlArray(ds.DNSSDDomains))
	w.comment("DNS server (\"host:port\") asked for those records; \"\" is the system resolver.")
	w.show("dnssd_resolver", tomlString(ds.DNSSDResolver))
	w.comment("How often the DNS-SD domains are resolved again.")
	w.show("dnssd_interval", tomlString(ds.DNSSDInterval.String()))
	w.comment("Private Kademlia DHT mode: \"auto\" (server unless AutoNAT finds the node")
	w.comment("private: every node of a LAN serves), \"server\", \"client\" or \"off\".")
	w.show("dht", tomlString(ds.DHT.String()))
	w.comment("Publish this node's signed capability advert, with its load, over gossipsub,")
	w.comment("on one topic per profile (docs/scale.md).")
	w.show("gossip", fmt.Sprint(ds.Gossip))
	w.comment("Publish the full advert this often even when nothing changed (at most \"2m30s\").")
	w.show("advert_interval", tomlString(ds.AdvertInterval.String()))
	w.comment("Least time between two adverts; a meaningful load change waits for it.")
	w.show("load_interval", tomlString(ds.LoadInterval.String()))
	w.comment("Providers of one profile that push adverts on its topic; the rest are")
	w.comment("found through the DHT and asked at request time. 0: no limit.")
	w.show("advert_push_max", fmt.Sprint(ds.AdvertPushMax))
	w.comment("Also listen and publish on /kith/capabilities/1, for nodes of earlier versions.")
	w.show("legacy_topic", fmt.Sprint(ds.LegacyTopic))
	w.comment("Connection manager water marks: past conns_high, connections are closed down")
	w.comment("to conns_low, DHT-only peers first; static peers, relays and delegation peers stay.")
	w.show("conns_low", fmt.Sprint(ds.ConnsLow))
	w.show("conns_high", fmt.Sprint(ds.ConnsHigh))
	w.blank()

	nt := d.NAT
	w.line("[nat]")
	w.comment("Relay nodes to reserve a slot on when this node is not reachable from the")
	w.comment("internet: full multiaddrs ending in /p2p/<peer id>.")
	w.show("relays", tomlArray(nt.Relays))
	w.comment("Wait this long after start before taking a relay reservation.")
	w.show("relay_boot_delay", tomlString(nt.RelayBootDelay.String()))
	w.comment("Ask the router for a port mapping (UPnP, NAT-PMP).")
	w.show("port_mapping", fmt.Sprint(nt.PortMapping))
	w.comment("Serve as a circuit relay for other peers (a public node, e.g. a small VPS).")
	w.comment("With [policy] mode = \"allowlist\" it relays only for allowed peers.")
	w.show("relay", fmt.Sprint(nt.Relay))
	w.comment("Relay service limits: peers holding a reservation, relayed connections per")
	w.comment("peer, and how long and how much (MiB each way) one relayed connection lasts.")
	w.show("relay_max_reservations", fmt.Sprint(nt.RelayMaxReservations))
	w.show("relay_max_circuits", fmt.Sprint(nt.RelayMaxCircuits))
	w.show("relay_circuit_duration", tomlString(nt.RelayCircuitDuration.String()))
	w.show("relay_circuit_mib", fmt.Sprint(nt.RelayCircuitMiB))
	w.blank()

	w.describeAPI(d.API)

	w.comment("Profiles: the kinds of work this node offers, to itself and to its peers,")
	w.comment("one [[profiles]] block each. With no profiles key at all the node offers the")
	w.comment("built-in \"echo\" profile; to offer nothing, write profiles = [] at the top.")
	w.comment("")
	w.comment("Who may use them: a peer you add (\"kith peers add ADDR\", or peers above) or")
	w.comment("allow (\"kith peers allow ID\") becomes \"verified\"; peers found on the LAN")
	w.comment("(mDNS), in DNS, the DHT or gossip stay \"untrusted\" until you say otherwise")
	w.comment("(\"kith peers trust ID verified\"). Every profile but echo needs \"verified\"")
	w.comment("unless its min_trust says otherwise, so a stranger on your LAN can run echo")
	w.comment("and nothing else.")
	for _, p := range d.Profiles {
		w.profile(p)
	}

	w.comment("An exec profile runs a command, without a shell: the task arrives on stdin")
	w.comment("and the result is read from stdout.")
	w.comment("")
	w.example(`[[profiles]]`)
	w.example(`name = "summarize"`)
	w.example(`description = "Summarizes text with a local script"`)
	w.example(`executor = "exec"`)
	w.example(`command = ["/usr/local/bin/summarize", "--json"]  # required: the argv`)
	w.example(`dir = ""   # working directory, an absolute path; "" is the daemon's`)
	w.example(`env = []   # extra environment entries, "NAME=value"`)
	w.example(`min_trust = ""  # "" is "verified" here: peers you added or allowed`)
	w.blank()
	w.comment("An openai profile sends the task to an OpenAI-compatible chat endpoint")
	w.comment("(Ollama, vLLM, llama.cpp's server, ...).")
	w.comment("")
	w.example(`[[profiles]]`)
	w.example(`name = "llama"`)
	w.example(`description = "Llama 3.1 8B on the local GPU"`)
	w.example(`skills = ["chat", "summarize"]`)
	w.example(`executor = "openai"`)
	w.example(`url = "http://127.0.0.1:11434/v1"  # required: base URL, http or https`)
	w.example(`model = "llama3.1:8b"             # required`)
	w.example(`api_key_env = ""                  # env var holding the API key; "" sends none`)
	w.example(`system = ""                       # system prompt; "" sends none`)
	w.example(`min_trust = "trusted"             # only peers you trust fully; "" is "verified"`)
	w.example(`vram_mib = 6144`)
	w.blank()
	w.comment("An a2a profile forwards the task to an A2A agent (v1.0, or v0.3 when its")
	w.comment("card says so); the agent's card is read from <url>/.well-known/agent-card.json.")
	w.comment("")
	w.example(`[[profiles]]`)
	w.example(`name = "researcher"`)
	w.example(`executor = "a2a"`)
	w.example(`url = "http://127.0.0.1:9999"   # required: the agent's base URL`)
	w.example(`api_key_env = "RESEARCHER_TOKEN" # env var holding a bearer token; "" sends none`)
	w.example(`timeout = "2m"                  # the agent must finish within it`)
	return []byte(w.b.String())
}

// profile writes one [[profiles]] block: the keys every profile needs set,
// and the optional ones with their defaults unless p sets them.
func (w *fileWriter) profile(p Profile) {
	w.line("[[profiles]]")
	w.comment(fmt.Sprintf("Unique name: a-z, 0-9, '.', '_', '-'; up to %d characters.", protocol.MaxProfileNameLen))
	w.set("name", tomlString(p.Name))
	w.comment("What the profile does, shown to peers and in A2A agent cards.")
	w.setOrShow(p.Description != "", "description", tomlString(p.Description))
	w.comment("Free-form tags peers can search for.")
	w.setOrShow(len(p.Skills) > 0, "skills", tomlArray(p.Skills))
	w.comment("What runs the work: " + executors.allowed() + ".")
	w.set("executor", tomlString(string(p.Executor)))
	w.comment("Largest token budget an offer may name; 0 also means the default.")
	if p.MaxBudgetTokens != 0 {
		w.set("max_budget_tokens", fmt.Sprint(p.MaxBudgetTokens))
	} else {
		w.show("max_budget_tokens", fmt.Sprint(DefaultMaxBudgetTokens))
	}
	w.comment("Timeout when the offer sets none; \"0s\" means limits.default_timeout.")
	w.setOrShow(p.Timeout != 0, "timeout", tomlString(p.Timeout.String()))
	w.comment("GPU memory one delegation leases, in MiB; 0 needs no GPU.")
	w.setOrShow(p.VRAMMiB != 0, "vram_mib", fmt.Sprint(p.VRAMMiB))
	w.comment("Lowest trust a peer needs to use this profile: \"untrusted\", \"verified\" or")
	w.comment("\"trusted\". \"\" means \"untrusted\" for executor \"echo\", \"verified\" for every other.")
	w.setOrShow(p.MinTrust != TrustDefault, "min_trust", tomlString(p.MinTrust.String()))
	w.blank()
}

type fileWriter struct{ b strings.Builder }

func (w *fileWriter) line(s string) { w.b.WriteString(s + "\n") }
func (w *fileWriter) blank()        { w.line("") }

func (w *fileWriter) comment(s string) {
	if s == "" {
		w.line("#")
		return
	}
	w.line("# " + s)
}

// set writes an active key; show writes a key commented out with its
// default. "#key" without a space marks a default that uncommenting keeps
// as it is; "#   " marks an example.
func (w *fileWriter) set(key, value string)  { w.line(key + " = " + value) }
func (w *fileWriter) show(key, value string) { w.line("#" + key + " = " + value) }
func (w *fileWriter) example(s string)       { w.line("#   " + s) }

func (w *fileWriter) setOrShow(set bool, key, value string) {
	if set {
		w.set(key, value)
	} else {
		w.show(key, value)
	}
}

// tomlArray writes ss on one line.
func tomlArray(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// tomlList writes ss one element a line, which is easier to edit.
func tomlList(ss []string) string {
	if len(ss) == 0 {
		return "[]"
	}
	var b strings.Builder
	b.WriteString("[\n")
	for _, s := range ss {
		b.WriteString("  " + tomlString(s) + ",\n")
	}
	b.WriteString("]")
	return b.String()
}

// tomlString quotes s as a TOML basic string. strconv.Quote will not do:
// TOML has no \x or \a escapes.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		case utf8.RuneError:
			b.WriteString(`\uFFFD`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
