package discovery

import (
	"strings"
	"testing"
)

// FuzzParseTXT: TXT strings come from anyone on the LAN (mDNS) or from a
// DNS server. The fuzzer's input is split on newlines into strings.
func FuzzParseTXT(f *testing.F) {
	id := testPeer(f, 1)
	f.Add("peer=" + id.String() + "\nprofiles=echo,llm\ndnsaddr=/ip4/192.168.1.2/tcp/4001")
	f.Add("peer=" + id.String() + "\ndnsaddr=/ip4/1.2.3.4/udp/1/quic-v1/p2p/" + id.String())
	f.Add("profiles=a,,b")
	f.Add("peer=\x00")
	f.Fuzz(func(t *testing.T, s string) {
		txt, err := ParseTXT(strings.Split(s, "\n"))
		if err != nil {
			return
		}
		again, err := ParseTXT(txt.Strings())
		if err != nil {
			t.Fatalf("parsed TXT %+v does not parse back: %v", txt, err)
		}
		if again.Peer != txt.Peer || len(again.Profiles) != len(txt.Profiles) {
			t.Fatalf("round trip changed %+v into %+v", txt, again)
		}
	})
}
