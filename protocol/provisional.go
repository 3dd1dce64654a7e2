package protocol

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers OfferAsksProvisional reads (kith.proto).
const (
	messageOfferField       = 3  // Message.delegation_offer
	offerProvisionalField   = 13 // DelegationOffer.provisional_result
	messageBodyFieldsBefore = 10 // Message's oneof body holds fields 1..9
)

// OfferAsksProvisional reports, for raw that DecodeMessage decodes as a
// DelegationOffer, that offer's ProvisionalResult
// (FuzzOfferAsksProvisional), without decoding the task: a stored offer of
// many megabytes is read for this one flag. For other input its answer
// means nothing; it never panics.
func OfferAsksProvisional(raw []byte) bool {
	asks, isOffer := false, false
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return false
		}
		raw = raw[n:]
		if num == messageOfferField && typ == protowire.BytesType {
			body, m := protowire.ConsumeBytes(raw)
			if m < 0 {
				return false
			}
			raw = raw[m:]
			if !isOffer {
				asks = false // a oneof member set anew starts empty
			}
			isOffer = true
			v, ok := provisionalIn(body, asks)
			if !ok {
				return false
			}
			asks = v
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, raw)
		if m < 0 {
			return false
		}
		raw = raw[m:]
		if typ == protowire.BytesType && num > 0 && num < messageBodyFieldsBefore {
			isOffer = false // another member of the oneof replaces the offer
		}
	}
	return isOffer && asks
}

// provisionalIn reads the provisional_result field of an encoded
// DelegationOffer, starting from cur (the value of the fields merged in
// before), the last occurrence winning as in protobuf.
func provisionalIn(b []byte, cur bool) (bool, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, false
		}
		b = b[n:]
		if num == offerProvisionalField && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return false, false
			}
			b, cur = b[m:], v != 0
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false, false
		}
		b = b[m:]
	}
	return cur, true
}
