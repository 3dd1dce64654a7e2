package discovery

import (
	"net"
	"os"
	"testing"
)

// needPrivateMulticast skips t unless the test runs in a private network
// namespace whose only interface is a multicast-capable loopback: mDNS on a
// real interface would leave the machine. With KITH_NETNS_REQUIRED=1 (set by
// .ci/run) the skip is a failure instead, so CI cannot pass without running
// the test.
func needPrivateMulticast(t *testing.T) {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	why := ""
	switch {
	case len(ifaces) != 1 || ifaces[0].Flags&net.FlagLoopback == 0:
		why = "not in a private network namespace (interfaces other than lo exist)"
	case ifaces[0].Flags&net.FlagMulticast == 0 || ifaces[0].Flags&net.FlagUp == 0:
		why = "lo is not up with multicast on"
	default:
		return
	}
	msg := why + `; run: unshare -n sh -c 'ip link set lo up; ip link set lo multicast on; ip route add 224.0.0.0/4 dev lo; exec go test -run MDNS ./discovery'`
	if os.Getenv("KITH_NETNS_REQUIRED") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
