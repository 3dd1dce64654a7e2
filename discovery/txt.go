package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/protocol"
)

// ErrBadTXT reports TXT data (mDNS or DNS-SD) that does not describe a
// kith peer.
var ErrBadTXT = errors.New("discovery: bad TXT record")

// TXT limits. One DNS character-string holds at most 255 bytes.
const (
	maxTXTStrings  = 64
	maxTXTString   = 255
	maxTXTProfiles = 32
	maxTXTAddrs    = 16
)

// TXT keys. Every string of a kith TXT record is key=value; unknown keys
// are ignored, so later versions can add some.
const (
	txtPeer     = "peer"     // the peer ID
	txtProfiles = "profiles" // comma-separated profile names, a hint
	txtAddr     = "dnsaddr"  // a multiaddr of the peer, with or without /p2p/<id>
)

// TXT is what a kith TXT record says about a peer.
type TXT struct {
	Peer     peer.ID
	Profiles []string
	Addrs    []ma.Multiaddr // without the /p2p/ part
}

// Strings encodes t as TXT strings, one key=value each, within the DNS
// limit of 255 bytes a string: profile names that would overflow one
// string go in another profiles= string.
func (t TXT) Strings() []string {
	out := []string{txtPeer + "=" + t.Peer.String()}
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, txtProfiles+"="+strings.Join(cur, ","))
			cur = nil
		}
	}
	for _, p := range t.Profiles {
		if len(txtProfiles)+1+len(strings.Join(append(cur, p), ",")) > maxTXTString {
			flush()
		}
		cur = append(cur, p)
	}
	flush()
	for _, a := range t.Addrs {
		if s := txtAddr + "=" + a.String(); len(s) <= maxTXTString {
			out = append(out, s)
		}
	}
	return out
}

// ParseTXT reads the strings of a kith TXT record. It needs exactly one
// valid peer= string; profile names must be valid (protocol.CheckProfileName)
// and addresses valid multiaddrs, and an address naming another peer than
// peer= is an error. Any violation is ErrBadTXT.
func ParseTXT(ss []string) (TXT, error) {
	if len(ss) > maxTXTStrings {
		return TXT{}, fmt.Errorf("%w: %d strings, at most %d", ErrBadTXT, len(ss), maxTXTStrings)
	}
	var t TXT
	var addrs []string
	for _, s := range ss {
		if len(s) > maxTXTString {
			return TXT{}, fmt.Errorf("%w: a string of %d bytes, at most %d", ErrBadTXT, len(s), maxTXTString)
		}
		key, val, ok := strings.Cut(s, "=")
		if !ok {
			continue // a bare attribute (RFC 6763 §6.4): not ours
		}
		switch strings.ToLower(key) {
		case txtPeer:
			id, err := peer.Decode(val)
			if err != nil {
				return TXT{}, fmt.Errorf("%w: peer=%q: %v", ErrBadTXT, val, err)
			}
			if t.Peer != "" && t.Peer != id {
				return TXT{}, fmt.Errorf("%w: two peer IDs, %s and %s", ErrBadTXT, t.Peer, id)
			}
			t.Peer = id
		case txtProfiles:
			for _, name := range strings.Split(val, ",") {
				if err := protocol.CheckProfileName(name); err != nil {
					return TXT{}, fmt.Errorf("%w: profiles=%q: %v", ErrBadTXT, val, err)
				}
				if !slices.Contains(t.Profiles, name) {
					t.Profiles = append(t.Profiles, name)
				}
			}
			if len(t.Profiles) > maxTXTProfiles {
				return TXT{}, fmt.Errorf("%w: more than %d profiles", ErrBadTXT, maxTXTProfiles)
			}
		case txtAddr:
			addrs = append(addrs, val)
			if len(addrs) > maxTXTAddrs {
				return TXT{}, fmt.Errorf("%w: more than %d addresses", ErrBadTXT, maxTXTAddrs)
			}
		}
	}
	if t.Peer == "" {
		return TXT{}, fmt.Errorf("%w: no peer= string", ErrBadTXT)
	}
	for _, s := range addrs {
		a, err := PeerAddr(t.Peer, s)
		if err != nil {
			return TXT{}, err
		}
		t.Addrs = append(t.Addrs, a)
	}
	return t, nil
}

// PeerAddr parses s as a multiaddr of peer id: either a transport address,
// or one that ends in /p2p/<id>, which is then removed. A multiaddr ending in
// another peer's ID is ErrBadTXT: a record must not speak for someone else.
func PeerAddr(id peer.ID, s string) (ma.Multiaddr, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %v", ErrBadTXT, s, err)
	}
	transport, last := ma.SplitLast(a)
	if last != nil && last.Code() == ma.P_P2P {
		other, err := peer.IDFromBytes(last.RawValue())
		if err != nil {
			return nil, fmt.Errorf("%w: address %q: %v", ErrBadTXT, s, err)
		}
		if other != id {
			return nil, fmt.Errorf("%w: address %q names peer %s, the record is about %s", ErrBadTXT, s, other, id)
		}
		a = transport
	}
	if len(a) == 0 {
		return nil, fmt.Errorf("%w: address %q has no transport part", ErrBadTXT, s)
	}
	return a, nil
}
