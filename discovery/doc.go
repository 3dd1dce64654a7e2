// Package discovery finds kith peers: static peers from the config, mDNS
// (_kith-a2a._tcp) on the LAN, DNS-SD records under a domain the user owns,
// a private Kademlia DHT (protocol prefix /kith) with one provider record
// per profile, and signed capability adverts gossiped on one topic per
// profile (ProfileTopic), each heard only by the nodes that serve or
// request that profile (docs/scale.md).
//
// Every source yields Hints: a peer ID and addresses worth dialing, never
// anything trusted. A peer's profiles count only once its signed capability
// assertion verifies (protocol.VerifyCapability); adverts are such
// assertions and are verified before they are handed on. Bad input from
// any source is dropped, counted in Counters under its source and reason,
// and logged at debug level; nothing a peer or a DNS server sends can stop
// a source.
package discovery
