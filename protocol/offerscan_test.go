package protocol

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// The scans that read one field of a stored offer without decoding its
// task (offerscan.go) agree with DecodeMessage.

// checkOfferScans fails t when a scan disagrees with what DecodeMessage
// makes of b: an offer's fields, or, for anything else that decodes, the
// scans' answers for no offer.
func checkOfferScans(t *testing.T, b []byte) {
	t.Helper()
	m, err := DecodeMessage(b)
	if err != nil {
		return
	}
	provisional, digest := false, DigestSHA256 // not an offer
	if o, ok := m.(*DelegationOffer); ok {
		provisional, digest = o.ProvisionalResult, o.ProofDigest
	}
	if got := OfferAsksProvisional(b); got != provisional {
		t.Fatalf("OfferAsksProvisional = %v, DecodeMessage says %v", got, provisional)
	}
	if got := OfferProofDigest(b); got != digest {
		t.Fatalf("OfferProofDigest = %s, DecodeMessage says %s", got, digest)
	}
}

// TestOfferScans: offers with and without each field, large ones, and
// encodings protobuf merges (the offer or a field given twice, the last
// one winning; the offer replaced by another member of the oneof; an
// enum given in a varint wider than 32 bits).
func TestOfferScans(t *testing.T) {
	offer := fixtureMessages(t)[TypeDelegationOffer-1].(*DelegationOffer)
	enc := func(o *DelegationOffer) []byte {
		b, err := EncodeMessage(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := enc(offer)
	asking := *offer
	asking.ProvisionalResult, asking.ProofDigest = true, DigestBLAKE3
	large := asking
	large.Task = Task{Role: "user", Parts: []Part{TextPart(string(make([]byte, 3<<20)))}}
	field := func(num protowire.Number, v uint64) []byte {
		body := protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
		return protowire.AppendBytes(protowire.AppendTag(nil, messageOfferField, protowire.BytesType), body)
	}
	status, err := EncodeMessage(&DelegationStatus{ID: fixtureDelegation, State: StateRunning, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"plain":                 plain,
		"asking":                enc(&asking),
		"large, asking":         enc(&large),
		"flag then cleared":     append(enc(&asking), field(offerProvisionalField, 0)...),
		"digest then cleared":   append(enc(&asking), field(offerDigestField, 0)...),
		"digest given twice":    append(enc(&asking), field(offerDigestField, 1)...),
		"digest in high bits":   append(slices.Clone(plain), field(offerDigestField, 1<<32|1)...),
		"offer merged, asking":  append(slices.Clone(plain), enc(&asking)...),
		"replaced by a status":  append(enc(&asking), status...),
		"status, then an offer": append(slices.Clone(status), enc(&asking)...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeMessage(b); err != nil {
				t.Fatalf("the case does not decode: %v", err)
			}
			checkOfferScans(t, b)
		})
	}
	if !OfferAsksProvisional(enc(&large)) || OfferAsksProvisional(plain) {
		t.Fatal("the scan does not read the flag")
	}
	if OfferProofDigest(enc(&large)) != DigestBLAKE3 || OfferProofDigest(plain) != DigestSHA256 {
		t.Fatal("the scan does not read the digest")
	}
}

// FuzzOfferScans: on any input DecodeMessage decodes as an offer, the
// scans report that offer's fields; on any input, they do not panic.
func FuzzOfferScans(f *testing.F) {
	for _, v := range slices.Concat(fixtureProvisional(f), fixtureDigests(f)) {
		b, err := EncodeMessage(v.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range messageSeeds(f) {
		f.Add(b)
	}
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkOfferScans(t, b)
	})
}
