// Package labtest is what kith's tests share when they depend on the
// machine or on something that happens elsewhere: skipping a lab that needs
// what this machine lacks (a network namespace, root, a Debian tool, a
// browser) unless CI requires it, and waiting, with a deadline, for another
// node or process to reach a state. It is for tests only; deps_test.go
// keeps every other package from importing it.
package labtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The environment variables under which .ci/run requires a lab: there a
// skip would prove nothing, so it fails the test instead.
const (
	// NetnsRequired: network namespaces, root and the Debian tools of the
	// NAT, LAN, mDNS and DNS-SD labs.
	NetnsRequired = "KITH_NETNS_REQUIRED"
	// BrowserRequired: Chromium, for the dashboard.
	BrowserRequired = "KITH_BROWSER_REQUIRED"
	// PromtoolRequired: Prometheus's promtool, to lint a scrape.
	PromtoolRequired = "KITH_PROMTOOL_REQUIRED"
	// InteropRequired: Node and the A2A JavaScript SDK.
	InteropRequired = "KITH_A2A_INTEROP_REQUIRED"
	// AIORequired: Linux AIO and a file system that takes direct I/O and
	// fallocate where the tests write (the store's value files).
	AIORequired = "KITH_AIO_REQUIRED"
)

// Lacking stops tb because the machine lacks what it needs, saying why
// (and how to get it): a skip, or a failure when the environment variable
// required is "1".
func Lacking(tb testing.TB, required, why string) {
	tb.Helper()
	if os.Getenv(required) == "1" {
		tb.Fatalf("%s (and %s=1)", why, required)
	}
	tb.Skip(why)
}

// Tool returns the path of a program, looking in /usr/sbin too (a non-root
// PATH often lacks it); when it is missing, tb is Lacking the Debian
// package pkg.
func Tool(tb testing.TB, required, name, pkg string) string {
	tb.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); isExecutable(p) {
		return p
	}
	Lacking(tb, required, name+" not found: install the Debian package "+pkg+" (apt-get install "+pkg+")")
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// PrivateMulticast stops tb unless it runs in a private network namespace
// whose only interface is a loopback that is up with multicast on: mDNS on
// a real interface would leave the machine. pkg names the package to test
// in the command it suggests ("./discovery").
func PrivateMulticast(tb testing.TB, pkg string) {
	tb.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		tb.Fatal(err)
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
	Lacking(tb, NetnsRequired, why+`; run: unshare -n sh -c 'ip link set lo up; ip link set lo multicast on; ip route add 224.0.0.0/4 dev lo; exec go test -run MDNS `+pkg+`'`)
}

// WaitFor calls cond until it holds, and fails tb if it still does not
// after within. It polls often at first and less often as the wait grows
// (every 5ms, doubling to every 100ms), so a quick condition is seen at once
// and a slow one that starts processes does not start hundreds.
func WaitFor(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Until(within, cond) {
		tb.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Until calls cond until it holds or within has passed, and reports
// whether it held.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	every := 5 * time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(min(every, time.Until(deadline)+time.Millisecond))
		every = min(2*every, 100*time.Millisecond)
	}
	return true
}
