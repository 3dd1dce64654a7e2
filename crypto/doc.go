// Package crypto owns a kith node's keys and everything signed or sealed
// with them.
//
// One Ed25519 key is the node's identity: the libp2p peer ID is derived from
// it, it signs envelope headers, capability assertions and result proofs.
// Those signatures are made and checked with curve25519-voi under the
// standard library's rules (ed25519.go): the same signatures and verdicts
// as crypto/ed25519, in about half the time.
// The X25519 key that envelopes are sealed to is derived from the same key,
// so a peer ID alone is enough to seal a message to its node.
//
// The stream envelope is HPKE (RFC 9180) in base mode with DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256 and AES-256-GCM. See Dial, Accept, Initiator
// and Responder. An identity keeps envelope sessions with its peers
// (protocol 1.2, session.go): one such setup per peer, then each stream's
// keys derived from it with no public-key operation. The sessions live in
// memory, in the Identity, so a restart drops them.
package crypto
