package protocol

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden vectors in testdata/ (go test ./protocol -run Golden -update)")

// Golden vectors pin the exact bytes each encoder produces for the fixed
// inputs in fixtures_test.go. A failure means the wire format moved: if that
// was meant, it is a protocol change (history in doc.go) and -update
// rewrites the files; if not, it is a bug.
//
// File format: lines starting with '#' are comments; the rest is hex,
// whitespace ignored.

func goldenPath(name string) string { return filepath.Join("testdata", name+".hex") }

// checkGolden compares got with testdata/<name>.hex, or rewrites the file
// under -update. The envelope vectors (envelope_header, hello) are meant to
// go through it too: see TestGoldenEnvelope.
func checkGolden(t *testing.T, name, comment string, got []byte) {
	t.Helper()
	path := goldenPath(name)
	if *update {
		if err := os.WriteFile(path, formatGolden(name, comment, got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want := readGolden(t, name)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: encoding drifted from the golden vector\n got %x\nwant %x\n(if the change is meant, run: go test ./protocol -run Golden -update)", path, got, want)
	}
}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(goldenPath(name))
	if err != nil {
		t.Fatalf("%v (create it with: go test ./protocol -run Golden -update)", err)
	}
	var h strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		h.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(h.String())
	if err != nil {
		t.Fatalf("%s: %v", goldenPath(name), err)
	}
	return b
}

func formatGolden(name, comment string, b []byte) []byte {
	var out bytes.Buffer
	fmt.Fprintf(&out, "# %s: %s\n", name, comment)
	fmt.Fprintf(&out, "# %d bytes. Inputs: fixtures_test.go. Regenerate: go test ./protocol -run Golden -update\n", len(b))
	h := hex.EncodeToString(b)
	for len(h) > 64 {
		out.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	out.WriteString(h + "\n")
	return out.Bytes()
}

func TestGoldenMessages(t *testing.T) {
	msgs := fixtureMessages(t)
	if len(msgs) != int(TypeDelegationCancel) {
		t.Fatalf("fixtures cover %d message types, want %d", len(msgs), TypeDelegationCancel)
	}
	for _, m := range msgs {
		name := m.Type().String()
		t.Run(name, func(t *testing.T) {
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name, "EncodeMessage of the "+name+" fixture", b)
			got, err := DecodeMessage(readGolden(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("decoded golden vector differs from the fixture\n got %+v\nwant %+v", got, m)
			}
		})
	}
}

func TestGoldenCapabilityAssertion(t *testing.T) {
	a := fixtureCapabilityAssertion(t)
	b, err := EncodeCapabilityAssertion(a)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "capability_assertion", "EncodeCapabilityAssertion of the fixture (the signed payload)", b)
	got, err := DecodeCapabilityAssertion(readGolden(t, "capability_assertion"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("decoded golden vector differs\n got %+v\nwant %+v", got, a)
	}
}

func TestGoldenResultProof(t *testing.T) {
	checkGoldenProof(t, "result_proof", "the signed payload", fixtureResultProof(t))
}

// checkGoldenProof pins p's encoding (EncodeResultProof) to the golden
// vector name, and checks that the vector decodes back to p.
func checkGoldenProof(t *testing.T, name, what string, p ResultProof) {
	t.Helper()
	b, err := EncodeResultProof(p)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, name, "EncodeResultProof of the fixture ("+what+")", b)
	got, err := DecodeResultProof(readGolden(t, name))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("decoded golden vector differs\n got %+v\nwant %+v", got, p)
	}
}

// envelopeVectors is the hook for the envelope's golden vectors
// (envelope_header.hex, hello.hex), whose encoder lives in package crypto.
// Each entry returns the bytes to pin; TestGoldenEnvelope checks them with
// checkGolden like every other vector.
var envelopeVectors []struct {
	name, comment string
	encode        func(t *testing.T) []byte
}

func TestGoldenEnvelope(t *testing.T) {
	if len(envelopeVectors) == 0 {
		t.Fatal("no envelope vectors registered (envelopeVectors in envelope_golden_test.go)")
	}
	for _, v := range envelopeVectors {
		t.Run(v.name, func(t *testing.T) { checkGolden(t, v.name, v.comment, v.encode(t)) })
	}
}
