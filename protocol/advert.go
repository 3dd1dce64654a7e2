package protocol

import (
	"fmt"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// MaxAdvertSize caps an encoded capability advert (a signed capability
// assertion on its own, as gossiped on the /kith/capabilities/1 topic).
// Adverts above it are refused before decoding.
const MaxAdvertSize = 64 << 10

// EncodeAdvert encodes a signed capability assertion as a gossip advert:
// a SignedAssertion message (kith.proto).
func EncodeAdvert(a crypto.Assertion) ([]byte, error) {
	if err := checkAssertion("advert", a); err != nil {
		return nil, err
	}
	return marshal(assertionToWire(a))
}

// DecodeAdvert decodes an advert without checking its signature; verify
// the result with VerifyCapability against the peer that published it.
func DecodeAdvert(b []byte) (crypto.Assertion, error) {
	if len(b) > MaxAdvertSize {
		return crypto.Assertion{}, fmt.Errorf("%w: advert of %d bytes, cap %d", ErrFrameTooLarge, len(b), MaxAdvertSize)
	}
	var w pb.SignedAssertion
	if err := unmarshal("advert", b, &w); err != nil {
		return crypto.Assertion{}, err
	}
	a := assertionFromWire(&w)
	if err := checkAssertion("advert", a); err != nil {
		return crypto.Assertion{}, err
	}
	return a, nil
}
