package crypto

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"filippo.io/edwards25519"
	p2pcrypto "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Errors returned while loading, saving or deriving keys.
var (
	// ErrKeyPermissions: the identity file is readable by group or others.
	ErrKeyPermissions = errors.New("crypto: identity key file permissions too open")
	// ErrKeyFormat: the identity file is not a kith identity key.
	ErrKeyFormat = errors.New("crypto: malformed identity key file")
	// ErrNotEd25519: a peer ID does not embed an Ed25519 public key.
	ErrNotEd25519 = errors.New("crypto: peer ID does not embed an Ed25519 key")
)

const pemType = "KITH ED25519 PRIVATE KEY"

// Identity is a node's Ed25519 key pair and the X25519 envelope key derived
// from it. The zero value is not usable; see GenerateIdentity and
// LoadIdentity.
type Identity struct {
	priv   ed25519.PrivateKey
	id     peer.ID
	envKey *ecdh.PrivateKey
	// sessions are the envelope sessions this identity holds, in memory
	// only: a restart (a new Identity) starts without any.
	sessions *sessionTable
}

// GenerateIdentity creates a fresh random identity.
func GenerateIdentity() (*Identity, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("crypto: generate identity: %w", err)
	}
	return IdentityFromSeed(seed)
}

// IdentityFromSeed builds the identity for a 32-byte Ed25519 seed. Tests and
// golden vectors use it to get fixed keys.
func IdentityFromSeed(seed []byte) (*Identity, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: seed has %d bytes, want %d", ErrKeyFormat, len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub, err := p2pcrypto.UnmarshalEd25519PublicKey(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("crypto: identity public key: %w", err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("crypto: peer id: %w", err)
	}
	envKey, err := ecdh.X25519().NewPrivateKey(x25519Scalar(seed))
	if err != nil {
		return nil, fmt.Errorf("crypto: derive envelope key: %w", err)
	}
	return &Identity{priv: priv, id: id, envKey: envKey, sessions: newSessionTable()}, nil
}

// x25519Scalar is the X25519 private scalar that corresponds to an Ed25519
// seed: the first half of SHA-512(seed), clamped (RFC 8032 §5.1.5). Its
// public half is therefore the Montgomery form of the Ed25519 public key.
func x25519Scalar(seed []byte) []byte {
	h := sha512.Sum512(seed)
	s := h[:32]
	s[0] &= 248
	s[31] &= 127
	s[31] |= 64
	return s
}

// PeerID is the libp2p peer ID of this identity.
func (i *Identity) PeerID() peer.ID { return i.id }

// PublicKey is the Ed25519 public key.
func (i *Identity) PublicKey() ed25519.PublicKey { return i.priv.Public().(ed25519.PublicKey) }

// EnvelopeKey is the X25519 private key that envelopes to this node are
// sealed to.
func (i *Identity) EnvelopeKey() *ecdh.PrivateKey { return i.envKey }

// Libp2pKey returns the identity as a libp2p private key, for building the
// host.
func (i *Identity) Libp2pKey() p2pcrypto.PrivKey {
	k, err := p2pcrypto.UnmarshalEd25519PrivateKey(i.priv)
	if err != nil {
		// A 64-byte ed25519.PrivateKey always unmarshals; anything else is a
		// bug in this package.
		panic("crypto: libp2p key from valid ed25519 key: " + err.Error())
	}
	return k
}

// sign signs msg with the identity key.
func (i *Identity) sign(msg []byte) []byte { return edSign(i.priv, msg) }

// Ed25519FromPeerID extracts the Ed25519 public key embedded in a peer ID.
func Ed25519FromPeerID(id peer.ID) (ed25519.PublicKey, error) {
	pk, err := id.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEd25519, err)
	}
	if pk.Type() != p2pcrypto.Ed25519 {
		return nil, fmt.Errorf("%w: key type %v", ErrNotEd25519, pk.Type())
	}
	raw, err := pk.Raw()
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: raw key", ErrNotEd25519)
	}
	return ed25519.PublicKey(raw), nil
}

// EnvelopePublicKey derives the X25519 public key that envelopes to id are
// sealed to, from the peer ID alone.
func EnvelopePublicKey(id peer.ID) (*ecdh.PublicKey, error) {
	k, err := cachedKeys(id)
	if err != nil {
		return nil, err
	}
	return k.x, nil
}

// montgomery converts an Ed25519 public key to the X25519 public key of the
// same secret (the birational map from edwards25519 to Curve25519).
func montgomery(edPub ed25519.PublicKey) (*ecdh.PublicKey, error) {
	p, err := new(edwards25519.Point).SetBytes(edPub)
	if err != nil {
		return nil, fmt.Errorf("%w: not a curve point: %v", ErrNotEd25519, err)
	}
	pub, err := ecdh.X25519().NewPublicKey(p.BytesMontgomery())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEd25519, err)
	}
	return pub, nil
}

// Save writes the identity to path with mode 0600, creating the parent
// directory (0700) if needed. It refuses to overwrite an existing file.
func (i *Identity) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("crypto: save identity: %w", err)
	}
	block := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: i.priv.Seed()})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("crypto: save identity: %w", err)
	}
	if _, err := f.Write(block); err != nil {
		f.Close()
		return fmt.Errorf("crypto: save identity: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("crypto: save identity: %w", err)
	}
	return f.Close()
}

// LoadIdentity reads an identity saved by Save. A file that group or others
// can read is refused: the key is the node.
func LoadIdentity(path string) (*Identity, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("crypto: load identity: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %#o; fix it with: chmod 600 %s",
			ErrKeyPermissions, path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("crypto: load identity: %w", err)
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != pemType || len(block.Bytes) != ed25519.SeedSize || len(trimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: %s", ErrKeyFormat, path)
	}
	return IdentityFromSeed(block.Bytes)
}

// IdentityExists reports whether path holds a file (of any content).
func IdentityExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == '\n' || b[0] == '\r' || b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// hpkePublicKey is the recipient key type the envelope seals to.
type hpkePublicKey = *ecdh.PublicKey
