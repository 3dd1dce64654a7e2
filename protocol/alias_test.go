package protocol

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// inBuffer says whether s's bytes lie in b's memory.
func inBuffer(s string, b []byte) bool {
	if len(s) == 0 || len(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(&b[0]))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(b))
}

// A large offer and a large result decode as proto.Unmarshal decodes them,
// with their large texts over the buffer's memory and the small ones
// copied.
func TestAliasUnmarshalLeavesLargeStringsInTheBuffer(t *testing.T) {
	big := strings.Repeat("kith ", aliasMin/5+1)
	offer := &DelegationOffer{ID: NewDelegationID(), Profile: "echo", BudgetTokens: 10, HopLimit: 2,
		Task: Task{Role: "user", Parts: []Part{TextPart("small"), TextPart(big), TextPart(big + "!")}}}
	result := &DelegationResult{ID: NewDelegationID(), State: StateCompleted, Output: []Part{TextPart(big)}}
	for _, m := range []Message{offer, result} {
		b, err := EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		var want, got pb.Message
		if err := unmarshal("message", b, &want); err != nil {
			t.Fatal(err)
		}
		if err := aliasUnmarshal("message", b, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&want, &got) {
			t.Fatalf("%s: decoded differently", m.Type())
		}
		dm, err := messageFromWire(&got)
		if err != nil {
			t.Fatal(err)
		}
		var parts []Part
		switch dm := dm.(type) {
		case *DelegationOffer:
			parts = dm.Task.Parts
		case *DelegationResult:
			parts = dm.Output
		}
		for _, p := range parts {
			if in := inBuffer(p.Text, b); in != (len(p.Text) >= aliasMin) {
				t.Errorf("%s: a text of %d bytes in the buffer: %v", m.Type(), len(p.Text), in)
			}
		}
	}
}

// What aliasUnmarshal does not follow it leaves to proto.Unmarshal, and
// what that refuses it refuses: a large string that is not UTF-8, a oneof
// set twice, a message field given twice (merged), a message cut short.
func TestAliasUnmarshalAgreesWithProto(t *testing.T) {
	big := bytes.Repeat([]byte{'a'}, aliasMin)
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	textPart := func(ss ...[]byte) []byte { // a TextPart with its text given once per s
		var b []byte
		for _, s := range ss {
			b = append(b, field(1, s)...)
		}
		return b
	}
	part := func(tp []byte) []byte { return field(1, tp) } // a Part whose kind is that TextPart
	task := func(parts ...[]byte) []byte {                 // a Task with these Parts
		var b []byte
		for _, p := range parts {
			b = append(b, field(1, p)...)
		}
		return b
	}
	bad := append(bytes.Clone(big), 0xff)
	cases := map[string][]byte{
		"large texts":           task(part(textPart(big)), part(textPart([]byte("x"))), part(textPart(big))),
		"large text, not UTF-8": task(part(textPart(bad))),
		"a part's kind twice":   task(cat(part(textPart(big)), field(2, nil))),
		"a part's text merged":  task(cat(part(textPart(big)), part(textPart([]byte("b"))))),
		"a text given twice":    task(part(textPart(big, []byte("b")))),
		"a large text replaced": task(part(textPart([]byte("b"), big))),
		"cut short":             task(part(textPart(big)))[:100],
		"unknown fields around": cat(field(9, big), task(part(textPart(big))), protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 3)),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { checkAgrees(t, b, &pb.Task{}, &pb.Task{}) })
	}
}

// FuzzAliasUnmarshal: on any bytes, aliasUnmarshal decodes what
// proto.Unmarshal decodes, to an equal message, and refuses what it
// refuses. Strings of 1 to 4 bytes or more (by the input's length) are
// left in the buffer, so that both its ways with a field are taken: the
// rewriting, and the copy of a message too short to hold such a string.
func FuzzAliasUnmarshal(f *testing.F) {
	for _, b := range messageSeeds(f) {
		f.Add(b)
	}
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	defer func(n int) { aliasMin = n }(aliasMin)
	f.Fuzz(func(t *testing.T, b []byte) {
		aliasMin = 1 + len(b)%4
		checkAgrees(t, b, &pb.Message{}, &pb.Message{})
	})
}

// checkAgrees fails t unless aliasUnmarshal decodes b into got as
// proto.Unmarshal decodes it into want (an empty message of the same
// type), or refuses it as that does.
func checkAgrees(t *testing.T, b []byte, want, got proto.Message) {
	t.Helper()
	werr := proto.Unmarshal(b, want)
	gerr := aliasUnmarshal("message", b, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("proto: %v; aliasUnmarshal: %v", werr, gerr)
	}
	if werr == nil && !proto.Equal(want, got) {
		t.Fatal("decoded differently")
	}
}

// DecodeMessageInPlace decodes what DecodeMessage decodes, its large texts
// over the buffer.
func TestDecodeMessageInPlace(t *testing.T) {
	big := strings.Repeat("x", aliasMin)
	b, err := EncodeMessage(&DelegationResult{ID: NewDelegationID(), State: StateCompleted, Output: []Part{TextPart(big), TextPart("y")}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMessageInPlace(b)
	if err != nil {
		t.Fatal(err)
	}
	w, g := want.(*DelegationResult), got.(*DelegationResult)
	if len(g.Output) != 2 || g.Output[0].Text != w.Output[0].Text || g.Output[1].Text != "y" {
		t.Fatal("decoded differently")
	}
	if !inBuffer(g.Output[0].Text, b) || inBuffer(w.Output[0].Text, b) {
		t.Fatal("the large text is not over the buffer, or DecodeMessage's is")
	}
	if _, err := DecodeMessageInPlace(b[:len(b)-1]); err == nil {
		t.Fatal("a cut message decoded")
	}
}
