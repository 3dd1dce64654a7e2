package discovery

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// FuzzAdvert feeds arbitrary bytes, as if published by one of two peers,
// through verifyAdvert, the stateless half of the gossip topic validator.
// It must never panic; whatever it accepts must really verify (signed by
// the author, about the author, unexpired), and whatever it refuses must
// say why.
func FuzzAdvert(f *testing.F) {
	author := fuzzIdentity(f, 0xa1)
	other := fuzzIdentity(f, 0xb2)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

	sign := func(id *crypto.Identity, issued time.Time) []byte {
		a := capability(f, id, 1, issued, time.Hour)
		return advertBytes(f, a)
	}
	good := sign(author, now)
	payload, err := protocol.DecodeAdvert(good)
	if err != nil {
		f.Fatal(err)
	}
	forged := advertBytes(f, other.SignAssertion(crypto.DomainCapabilityAssertion, payload.Payload))
	for _, seed := range [][]byte{
		good,
		sign(author, now.Add(-2*time.Hour)), // expired
		sign(other, now),                    // someone else's, when published by author
		forged,
		good[:len(good)-1],
		append(bytes.Clone(good), 0),
		{},
		[]byte("not an advert"),
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}

	f.Fuzz(func(t *testing.T, data []byte, byOther bool) {
		who := author.PeerID()
		if byOther {
			who = other.PeerID()
		}
		adv, err := verifyAdvert(who, data, now)
		if err != nil {
			if AdvertReason(err) == "" || !errors.Is(err, ErrBadAdvert) {
				t.Fatalf("refused without a reason: %v", err)
			}
			return
		}
		if adv.From != who || adv.Assertion.Provider != who {
			t.Fatalf("accepted an advert about %s from %s as %s's", adv.Assertion.Provider, who, adv.From)
		}
		c, err := protocol.VerifyCapability(who, adv.Signed, now)
		if err != nil {
			t.Fatalf("accepted an advert that does not verify: %v", err)
		}
		if !now.Before(c.ExpiresAt) {
			t.Fatalf("accepted an advert that expired at %v", c.ExpiresAt)
		}
		if !bytes.Contains(data, adv.Signed.Payload) || !bytes.Contains(data, adv.Signed.Signature) {
			t.Fatal("the accepted assertion is not the bytes that were published")
		}
	})
}

func fuzzIdentity(tb testing.TB, seed byte) *crypto.Identity {
	tb.Helper()
	id, err := crypto.IdentityFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// FuzzSubscriptions feeds arbitrary topic names, as a peer would announce
// them, to the subscription filter: it never panics, keeps only advert
// topics, and never more than maxPeerTopics for one peer.
func FuzzSubscriptions(f *testing.F) {
	for _, s := range []string{Topic, ProfileTopic("llm"), TopicPrefix, TopicPrefix + "zz", "", "/kith/capabilities/1/" + string(make([]byte, 32))} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, topic string, on bool) {
		fl := &subscriptionFilter{allowed: func(peer.ID) bool { return true }, topics: map[peer.ID]map[string]bool{}}
		subs := []*pb.RPC_SubOpts{{Topicid: &topic, Subscribe: &on}}
		got, err := fl.FilterIncomingSubscriptions("p", subs)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > 0 && !validTopic(topic) {
			t.Fatalf("kept a subscription to %q", topic)
		}
		if validTopic(topic) && topic != Topic && !strings.HasPrefix(topic, TopicPrefix) {
			t.Fatalf("%q taken for an advert topic", topic)
		}
	})
}

// FuzzProvidersAnswer feeds arbitrary bytes, as a connected DHT server's
// answer to FindProviders' direct question, through
// decodeProvidersAnswer. It must never panic; what it accepts is a
// GET_PROVIDERS answer about the key asked, and what it refuses is an
// errMalformedAnswer.
func FuzzProvidersAnswer(f *testing.F) {
	key := ProfileKey("llm").Hash()
	good := dhtpb.NewMessage(dhtpb.Message_GET_PROVIDERS, key, 0)
	good.ProviderPeers = dhtpb.RawPeerInfosToPBPeers([]peer.AddrInfo{{ID: "12D3KooWKKtKuwUgei6LYHwNnFH15ZLQWgRcMzebQXyj5fdZMxSE"}})
	good.CloserPeers = good.ProviderPeers
	b, err := proto.Marshal(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		provs, closer, err := decodeProvidersAnswer(b, key)
		if err != nil {
			if !errors.Is(err, errMalformedAnswer) {
				t.Fatalf("refused with %v, not errMalformedAnswer", err)
			}
			if provs != nil || closer != nil {
				t.Fatal("refused, and returned peers")
			}
			return
		}
		var m dhtpb.Message
		if err := proto.Unmarshal(b, &m); err != nil || m.GetType() != dhtpb.Message_GET_PROVIDERS || !bytes.Equal(m.GetKey(), key) {
			t.Fatalf("accepted %x: %v, type %v", b, err, m.GetType())
		}
		if len(provs) != len(m.GetProviderPeers()) {
			t.Fatalf("%d providers from %d records", len(provs), len(m.GetProviderPeers()))
		}
	})
}
