// Package crypto owns a kith node's keys and everything signed or sealed
// with them.
//
// One Ed25519 key is the node's identity: the libp2p peer ID is derived from
// it, it signs envelope headers, capability assertions and result proofs.
// The X25519 key that envelopes are sealed to is derived from the same key,
// so a peer ID alone is enough to seal a message to its node.
//
// The stream envelope is HPKE (RFC 9180) in base mode with DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256 and AES-256-GCM. See Opener and Responder.
package crypto
