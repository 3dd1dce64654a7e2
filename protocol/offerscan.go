package protocol

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers the offer scans read (kith.proto).
const (
	messageOfferField       = 3  // Message.delegation_offer
	offerProvisionalField   = 13 // DelegationOffer.provisional_result
	offerDigestField        = 14 // DelegationOffer.proof_digest
	messageBodyFieldsBefore = 10 // Message's oneof body holds fields 1..9
)

// OfferAsksProvisional reports, for raw that DecodeMessage decodes as a
// DelegationOffer, that offer's ProvisionalResult
// (FuzzOfferScans), without decoding the task: a stored offer of
// many megabytes is read for this one flag. For other input its answer
// means nothing; it never panics.
func OfferAsksProvisional(raw []byte) bool {
	v, ok := offerVarint(raw, offerProvisionalField)
	return ok && v != 0
}

// OfferProofDigest is, for raw that DecodeMessage decodes as a
// DelegationOffer, that offer's ProofDigest (FuzzOfferScans),
// read as OfferAsksProvisional reads its flag. For other input it is
// SHA-256, or a digest this build does not know; it never panics.
func OfferProofDigest(raw []byte) ProofDigest {
	v, ok := offerVarint(raw, offerDigestField)
	if e := int32(v); ok && e > 0 && e <= 255 { // an enum is the varint's low 32 bits
		return ProofDigest(e)
	}
	return DigestSHA256
}

// offerVarint reads varint field num of the DelegationOffer that raw, an
// encoded Message, holds: 0 when the offer leaves it out, the last
// occurrence winning as in protobuf. ok is false when raw holds no offer
// (or is malformed).
func offerVarint(raw []byte, num protowire.Number) (v uint64, ok bool) {
	isOffer := false
	for len(raw) > 0 {
		n, typ, k := protowire.ConsumeTag(raw)
		if k < 0 {
			return 0, false
		}
		raw = raw[k:]
		if n == messageOfferField && typ == protowire.BytesType {
			body, m := protowire.ConsumeBytes(raw)
			if m < 0 {
				return 0, false
			}
			raw = raw[m:]
			if !isOffer {
				v = 0 // a oneof member set anew starts empty
			}
			isOffer = true
			if v, ok = varintIn(body, num, v); !ok {
				return 0, false
			}
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, raw)
		if m < 0 {
			return 0, false
		}
		raw = raw[m:]
		if typ == protowire.BytesType && n > 0 && n < messageBodyFieldsBefore {
			isOffer = false // another member of the oneof replaces the offer
		}
	}
	if !isOffer {
		return 0, false
	}
	return v, true
}

// varintIn reads varint field num of an encoded message, starting from
// cur (the value of the fields merged in before), the last occurrence
// winning as in protobuf.
func varintIn(b []byte, num protowire.Number, cur uint64) (uint64, bool) {
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return 0, false
		}
		b = b[k:]
		if n == num && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, false
			}
			b, cur = b[m:], v
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
	}
	return cur, true
}
