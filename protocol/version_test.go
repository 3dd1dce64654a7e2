package protocol

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"
)

func TestProtocolID(t *testing.T) {
	if ID != protocol.ID("/kith/delegate/1.0.0") {
		t.Fatalf("ID = %q", ID)
	}
	if len(Supported) == 0 || Supported[len(Supported)-1] != ProofDigests || !Speaks(Supported, MultiTurn) || !Speaks(Supported, ProvisionalResults) {
		t.Fatalf("Supported = %v", Supported)
	}
}

func TestParseVersion(t *testing.T) {
	good := map[string]Version{"1.0": {1, 0}, "0.0": {0, 0}, "1.12": {1, 12}, "65535.65535": {65535, 65535}}
	for s, want := range good {
		v, err := ParseVersion(s)
		if err != nil || v != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", s, v, err, want)
		}
		if v.String() != s {
			t.Errorf("%v.String() = %q, want %q", v, v.String(), s)
		}
		text, _ := v.MarshalText()
		var back Version
		if err := back.UnmarshalText(text); err != nil || back != v {
			t.Errorf("text round trip of %v: %v, %v", v, back, err)
		}
	}
	for _, s := range []string{"", "1", "1.", ".0", "1.0.0", "01.0", "1.00", "+1.0", "-1.0", "1.a", "65536.0", " 1.0", "1.0 ", "1_0.0", "0x1.0"} {
		if v, err := ParseVersion(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseVersion(%q) = %v, %v; want ErrMalformed", s, v, err)
		}
	}
}

func TestNegotiate(t *testing.T) {
	v := func(vs ...Version) []Version { return vs }
	cases := []struct {
		name          string
		ours, theirs  []Version
		want          Version
		wantSupported bool
	}{
		{"same", v(Version{1, 0}), v(Version{1, 0}), Version{1, 0}, true},
		{"they are newer", v(Version{1, 0}), v(Version{1, 0}, Version{1, 3}), Version{1, 0}, true},
		{"we are newer", v(Version{1, 2}), v(Version{1, 0}), Version{1, 0}, true},
		{"minor implies lower minors", v(Version{1, 4}), v(Version{1, 2}), Version{1, 2}, true},
		{"highest common major", v(Version{1, 5}, Version{2, 1}), v(Version{1, 2}, Version{2, 0}), Version{2, 0}, true},
		{"order does not matter", v(Version{2, 1}, Version{1, 5}), v(Version{2, 0}, Version{1, 2}), Version{2, 0}, true},
		{"other major only", v(Version{1, 0}), v(Version{2, 0}), Version{}, false},
		{"they list none", v(Version{1, 0}), nil, Version{}, false},
		{"we list none", nil, v(Version{1, 0}), Version{}, false},
		{"Supported with itself", Supported, Supported, Supported[len(Supported)-1], true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Negotiate(c.ours, c.theirs)
			if !c.wantSupported {
				if !errors.Is(err, ErrVersionUnsupported) {
					t.Fatalf("got %v, %v; want ErrVersionUnsupported", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
			if back, err := Negotiate(c.theirs, c.ours); err != nil || back != got {
				t.Fatalf("not symmetric: reversed gives %v, %v", back, err)
			}
		})
	}
}
