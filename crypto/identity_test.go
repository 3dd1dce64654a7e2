package crypto

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestIdentitySaveLoadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "home", "identity.key")
	id, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("key file mode %#o, want 0600", perm)
	}
	got, err := LoadIdentity(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.PeerID() != id.PeerID() {
		t.Fatalf("peer id changed across save/load: %s vs %s", got.PeerID(), id.PeerID())
	}
	if !bytes.Equal(got.EnvelopeKey().Bytes(), id.EnvelopeKey().Bytes()) {
		t.Fatal("envelope key changed across save/load")
	}
	if err := id.Save(path); err == nil {
		t.Fatal("Save overwrote an existing identity")
	}
}

func TestLoadIdentityRefusesOpenPermissions(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660} {
		path := filepath.Join(t.TempDir(), "identity.key")
		id, _ := GenerateIdentity()
		if err := id.Save(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadIdentity(path)
		if !errors.Is(err, ErrKeyPermissions) {
			t.Fatalf("mode %#o: got %v, want ErrKeyPermissions", mode, err)
		}
		if !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Fatalf("mode %#o: error does not say how to fix it: %v", mode, err)
		}
	}
}

func TestLoadIdentityRejectsGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadIdentity(path); !errors.Is(err, ErrKeyFormat) {
		t.Fatalf("got %v, want ErrKeyFormat", err)
	}
}

// The X25519 public key a sender computes from the peer ID alone must be the
// public half of the private key the recipient derives from its seed.
func TestEnvelopeKeyFromPeerIDMatchesPrivate(t *testing.T) {
	for i := 0; i < 50; i++ {
		id, err := GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		fromID, err := EnvelopePublicKey(id.PeerID())
		if err != nil {
			t.Fatal(err)
		}
		if !fromID.Equal(id.EnvelopeKey().PublicKey()) {
			t.Fatalf("identity %d: public key from peer ID differs from derived private key's", i)
		}
	}
}

func TestEnvelopePublicKeyRejectsNonEd25519(t *testing.T) {
	// An identity-multihash peer ID that embeds a secp256k1-typed key.
	bogus := peer.ID("\x00\x25\x08\x02\x12\x21" + strings.Repeat("\x02", 33))
	if _, err := EnvelopePublicKey(bogus); !errors.Is(err, ErrNotEd25519) {
		t.Fatalf("got %v, want ErrNotEd25519", err)
	}
	if _, err := EnvelopePublicKey(peer.ID("garbage")); !errors.Is(err, ErrNotEd25519) {
		t.Fatalf("got %v, want ErrNotEd25519", err)
	}
}

func TestLibp2pKeyMatchesPeerID(t *testing.T) {
	id, _ := GenerateIdentity()
	if !id.PeerID().MatchesPrivateKey(id.Libp2pKey()) {
		t.Fatal("libp2p key does not match peer ID")
	}
}

func TestAssertionVerifiesExactBytes(t *testing.T) {
	id, _ := GenerateIdentity()
	other, _ := GenerateIdentity()
	a := id.SignAssertion(DomainCapabilityAssertion, []byte("payload bytes"))
	if err := VerifyAssertion(id.PeerID(), DomainCapabilityAssertion, a); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		signer peer.ID
		domain string
		a      Assertion
	}{
		"flipped payload bit": {id.PeerID(), DomainCapabilityAssertion, Assertion{Payload: []byte("payload bytez"), Signature: a.Signature}},
		"appended byte":       {id.PeerID(), DomainCapabilityAssertion, Assertion{Payload: []byte("payload bytes\x00"), Signature: a.Signature}},
		"other signer":        {other.PeerID(), DomainCapabilityAssertion, a},
		"other domain":        {id.PeerID(), DomainResultProof, a},
		"short signature":     {id.PeerID(), DomainCapabilityAssertion, Assertion{Payload: a.Payload, Signature: a.Signature[:10]}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if err := VerifyAssertion(c.signer, c.domain, c.a); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want ErrBadSignature", err)
			}
		})
	}
}
