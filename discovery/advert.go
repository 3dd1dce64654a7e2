package discovery

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// Topic is the gossipsub topic of kith 0.x nodes before per-profile
// topics: every node's advert, every 30 s. New nodes listen and publish
// there only with GossipConfig.LegacyTopic (see docs/scale.md).
const Topic = "/kith/capabilities/1"

// TopicPrefix starts every per-profile topic (ProfileTopic).
const TopicPrefix = Topic + "/"

// ProfileTopic is the topic that carries the adverts of the providers of
// profile: TopicPrefix and the first 16 bytes of SHA-256("kith/profile/" +
// profile) in hex. A node subscribes to the topics of the profiles it
// serves and of those it requests, so it hears of no other.
func ProfileTopic(profile string) string {
	sum := sha256.Sum256([]byte("kith/profile/" + profile))
	return TopicPrefix + hex.EncodeToString(sum[:topicHashLen])
}

const topicHashLen = 16

// validTopic reports whether t is Topic or has the form of a ProfileTopic.
func validTopic(t string) bool {
	if t == Topic {
		return true
	}
	h, ok := strings.CutPrefix(t, TopicPrefix)
	if !ok || len(h) != 2*topicHashLen {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// maxGossipMessage caps one pubsub RPC: an advert plus room for the pubsub
// envelope (author, sequence number, signature, topic). It is below
// gossipsub's 1 MiB default, so keeping the default protocol IDs is safe:
// no peer sends us more than it would send anyone.
const maxGossipMessage = protocol.MaxAdvertSize + 4<<10

// Reasons an advert is dropped, as counted under "gossip/<reason>".
const (
	AdvertOversized  = "oversized"       // above protocol.MaxAdvertSize
	AdvertMalformed  = "malformed"       // does not decode
	AdvertForged     = "forged"          // signature is not the author's
	AdvertMismatched = "mismatched_peer" // about a peer other than its author
	AdvertExpired    = "expired"         // past its expiry
	AdvertDenied     = "denied"          // author or forwarding peer denied
	AdvertStale      = "stale"           // older than one already seen from its author
	AdvertOffTopic   = "off_topic"       // on the topic of a profile it does not offer
	AdvertTooSoon    = "too_soon"        // issued less than MinGap after its author's last
)

// ErrBadAdvert: an advert failed validation. The error also wraps the
// cause (protocol.ErrMalformed, protocol.ErrExpired,
// protocol.ErrPeerMismatch, crypto.ErrBadSignature, ...).
var ErrBadAdvert = errors.New("discovery: bad advert")

// advertError says which rule refused an advert.
type advertError struct {
	reason string // one of the Advert* reasons
	err    error
}

func (e *advertError) Error() string {
	return fmt.Sprintf("%v (%s): %v", ErrBadAdvert, e.reason, e.err)
}

func (e *advertError) Unwrap() []error { return []error{ErrBadAdvert, e.err} }

// AdvertReason returns the Advert* reason of an error from the gossip
// validation, or "" if err is not one.
func AdvertReason(err error) string {
	if ae, ok := errors.AsType[*advertError](err); ok {
		return ae.reason
	}
	return ""
}

// Advert is a verified capability advert.
type Advert struct {
	From      peer.ID                      // the author; Assertion.Provider is the same peer
	Assertion protocol.CapabilityAssertion // decoded from Signed
	Signed    crypto.Assertion             // the exact bytes the author signed
	Received  time.Time                    // when it was verified
}

// verifyAdvert checks data, an advert published by author, at now: the
// whole of the validation that needs no state. It never panics, whatever
// data holds. An error wraps ErrBadAdvert and names one of the Advert*
// reasons (AdvertReason).
func verifyAdvert(author peer.ID, data []byte, now time.Time) (Advert, error) {
	bad := func(reason string, err error) (Advert, error) {
		return Advert{}, &advertError{reason: reason, err: err}
	}
	if len(data) > protocol.MaxAdvertSize {
		return bad(AdvertOversized, fmt.Errorf("%w: %d bytes, cap %d", protocol.ErrFrameTooLarge, len(data), protocol.MaxAdvertSize))
	}
	if err := author.Validate(); err != nil {
		return bad(AdvertMalformed, fmt.Errorf("author: %w", err))
	}
	signed, err := protocol.DecodeAdvert(data)
	if err != nil {
		return bad(AdvertMalformed, err)
	}
	c, err := protocol.VerifyCapability(author, signed, now)
	switch {
	case err == nil:
		return Advert{From: author, Assertion: c, Signed: signed, Received: now}, nil
	case errors.Is(err, protocol.ErrExpired):
		return bad(AdvertExpired, err)
	case errors.Is(err, protocol.ErrPeerMismatch):
		return bad(AdvertMismatched, err)
	case errors.Is(err, crypto.ErrBadSignature), errors.Is(err, crypto.ErrNotEd25519):
		// Not the author's signature. An advert that someone else signed
		// about themselves and the author passes on as its own is a
		// mismatch, not a forgery: tell the two apart for the counters.
		if other, derr := protocol.DecodeCapabilityAssertion(signed.Payload); derr == nil && other.Provider != author {
			return bad(AdvertMismatched, fmt.Errorf("%w: assertion about %s published by %s", protocol.ErrPeerMismatch, other.Provider, author))
		}
		return bad(AdvertForged, err)
	default:
		return bad(AdvertMalformed, err)
	}
}
