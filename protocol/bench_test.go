package protocol

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// Compare with the raw protobuf baseline side by side (see TESTING.md:
// ratios, not absolute times): the difference is what validation and the
// domain conversion cost.

func BenchmarkEncodeOffer(b *testing.B) {
	m := fixtureMessages(b)[TypeDelegationOffer-1]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeMessage(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeOffer(b *testing.B) {
	enc := messageSeeds(b)[TypeDelegationOffer]
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeMessage(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeOfferRawProto is the baseline: protobuf alone, no checks.
func BenchmarkDecodeOfferRawProto(b *testing.B) {
	enc := messageSeeds(b)[TypeDelegationOffer]
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		var w pb.Message
		if err := proto.Unmarshal(enc, &w); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFrame(b *testing.B) {
	wire := frameBytes(bytes.Repeat([]byte{1}, 64<<10))
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewFrameReader(bytes.NewReader(wire), 0).ReadFrame(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutputDigest is a result proof's output digest of one text
// part, made with each proof digest side by side: SHA-256, every
// version's and the baseline, and BLAKE3 (1.6). A delegation makes four
// such passes over its payload, offer and output on each side.
func BenchmarkOutputDigest(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 16 << 20} {
		out := []Part{TextPart(string(bytes.Repeat([]byte("k"), size)))}
		for _, d := range []ProofDigest{DigestSHA256, DigestBLAKE3} {
			b.Run(fmt.Sprintf("%s/%dKiB", d, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					OutputDigest(d, out)
				}
			})
		}
	}
}
