package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
)

// ID is the libp2p protocol ID of kith's delegation streams. A new major
// version gets a new ID; minor versions are negotiated inside it (Negotiate).
const ID p2pprotocol.ID = "/kith/delegate/1.0.0"

// ErrVersionUnsupported: two peers share no protocol version.
var ErrVersionUnsupported = errors.New("protocol: no common protocol version")

// Version is a protocol version. Within one major version, a higher minor
// version only adds (fields, enum values, features), so a peer that speaks
// 1.2 also speaks 1.0 and 1.1. Its text form is "major.minor".
type Version struct {
	Major, Minor uint16
}

// Supported lists the versions this build speaks, highest last.
//
//	1.0  the eight message types
//	1.1  chunked messages (Chunk) and max_payload_bytes in assertions
//	1.2  envelope sessions (negotiated in the envelope itself: an offer
//	     in the signed header, an ack from the responder)
//	1.3  multi-turn delegations: input_required with a question, answered
//	     by a continuation (an offer with turn >= 2); see MultiTurn
//	1.4  stream reuse: a requester may send its next offer on the stream
//	     of a delegation whose result it has; see StreamReuse
//	1.5  provisional results: a provider may send a result before its
//	     record of it is durable, and confirms it once it is; see
//	     ProvisionalResults
//	1.6  proof digests: a requester may ask for a result proof made with
//	     BLAKE3 instead of SHA-256; see ProofDigests
var Supported = []Version{{1, 0}, {1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5}, {1, 6}}

// MultiTurn is the version that brings multi-turn delegations. A requester
// marks an offer multi_turn, and sends continuations, only to a provider
// whose capability assertion lists it; a provider pauses a delegation for
// input only when its offer is so marked.
var MultiTurn = Version{1, 3}

// StreamReuse is the version from which a provider reads a delegation's
// stream, after the result, for the requester's next offer, and serves it
// as it would the first message of a new stream. A requester keeps a
// stream for its next offer only for a provider whose capability assertion
// lists it; no message or field changes.
var StreamReuse = Version{1, 4}

// ProvisionalResults is the version from which a requester may ask, in
// its offer (ProvisionalResult), for a result sent while the provider's
// write of it syncs, confirmed by a status with Stored set once it is
// durable; a provider then follows every result of that delegation with
// the confirmation. A requester asks only a provider whose capability
// assertion lists it.
var ProvisionalResults = Version{1, 5}

// ProofDigests is the version from which a requester may name, in its
// offer (DelegationOffer.ProofDigest), the hash it would have the result's
// proof made with, and a provider names the one it used in the proof
// (ResultProof.Digest): the requester's choice or SHA-256. A requester
// asks only a provider whose capability assertion lists it.
var ProofDigests = Version{1, 6}

// Speaks reports whether a peer that lists vs speaks v (a listed version
// of the same major and at least v's minor implies it).
func Speaks(vs []Version, v Version) bool {
	for _, w := range vs {
		if w.Major == v.Major && w.Minor >= v.Minor {
			return true
		}
	}
	return false
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less orders versions by major, then minor.
func (v Version) Less(w Version) bool {
	return v.Major < w.Major || (v.Major == w.Major && v.Minor < w.Minor)
}

// MarshalText implements encoding.TextMarshaler.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *Version) UnmarshalText(b []byte) error {
	p, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// ParseVersion parses "major.minor": two decimal numbers up to 65535
// without signs or leading zeros, so every version has one text form.
func ParseVersion(s string) (Version, error) {
	bad := &fieldError{err: fmt.Errorf("version %q is not major.minor", s)}
	maj, min, ok := strings.Cut(s, ".")
	if !ok {
		return Version{}, bad
	}
	a, err1 := parseVersionPart(maj)
	b, err2 := parseVersionPart(min)
	if err1 != nil || err2 != nil {
		return Version{}, bad
	}
	return Version{a, b}, nil
}

func parseVersionPart(s string) (uint16, error) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, errors.New("bad number")
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, errors.New("bad number")
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}

// Negotiate picks the version two peers use: the highest version both
// speak. Versions of one major are compatible, and listing major.minor
// implies every lower minor of that major, so for each major both lists
// share, the common version is the lower of the two highest minors. An empty
// intersection is ErrVersionUnsupported.
func Negotiate(ours, theirs []Version) (Version, error) {
	ourMax := highestMinors(ours)
	theirMax := highestMinors(theirs)
	var best Version
	found := false
	for major, a := range ourMax {
		b, ok := theirMax[major]
		if !ok {
			continue
		}
		v := Version{major, min(a, b)}
		if !found || best.Less(v) {
			best, found = v, true
		}
	}
	if !found {
		return Version{}, fmt.Errorf("%w: ours %v, theirs %v", ErrVersionUnsupported, ours, theirs)
	}
	return best, nil
}

func highestMinors(vs []Version) map[uint16]uint16 {
	m := make(map[uint16]uint16, len(vs))
	for _, v := range vs {
		if cur, ok := m[v.Major]; !ok || v.Minor > cur {
			m[v.Major] = v.Minor
		}
	}
	return m
}
