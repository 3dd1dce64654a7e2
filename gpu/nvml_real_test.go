//go:build cgo

package gpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
)

// TestRealNVML runs against the machine's own driver. CI has no GPU, so it
// runs only when asked.
func TestRealNVML(t *testing.T) {
	if os.Getenv("KITH_REAL_NVML") != "1" {
		t.Skip("needs an NVIDIA GPU and driver; run: KITH_REAL_NVML=1 go test -run RealNVML -v ./gpu")
	}
	inv, err := OpenNVML()
	if err != nil {
		t.Fatalf("OpenNVML: %v", err)
	}
	defer func() {
		if err := inv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	devs, err := inv.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	for _, p := range inv.Problems() {
		t.Logf("skipped GPU %d: %s", p.Index, p.Reason)
	}
	if len(devs) == 0 {
		t.Fatal("NVML opened but lists no devices")
	}
	for _, d := range devs {
		t.Logf("GPU %d: %s %s total=%d MiB used=%d MiB free=%d MiB", d.Index, d.Name, d.UUID, d.TotalMiB, d.UsedMiB, d.FreeMiB)
		if d.TotalMiB == 0 {
			t.Errorf("GPU %d reports 0 MiB total", d.Index)
		}
		if d.FreeMiB > d.TotalMiB {
			t.Errorf("GPU %d: free %d MiB > total %d MiB", d.Index, d.FreeMiB, d.TotalMiB)
		}
	}
	t.Logf("Describe:\n%s", Describe(inv))

	// The ledger over the real inventory grants what fits on one device.
	l := NewLedger(inv, 512, nil)
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Room() {
		t.Logf("ledger: GPU %d capacity %d MiB", r.Device.Index, r.CapacityMiB)
	}
	if room := l.Room()[0].CapacityMiB; room > 0 {
		ls, err := l.Grant(LeaseRequest{Owner: "real-nvml-test", VRAMMiB: room})
		if err != nil {
			t.Fatalf("Grant(%d MiB): %v", room, err)
		}
		ls.Release()
	}
}

// TestRealNVMLSeesOtherProcesses checks, on a real GPU, that memory another
// process takes shrinks what the ledger will lease to peers, and that a
// local request can still preempt a remote lease. KITH_REAL_NVML_HOG is a
// shell command that allocates $HOG_MIB MiB of VRAM, prints "ready" and
// waits: testdata/vram_hog.py does it with PyTorch.
func TestRealNVMLSeesOtherProcesses(t *testing.T) {
	hog := os.Getenv("KITH_REAL_NVML_HOG")
	if os.Getenv("KITH_REAL_NVML") != "1" || hog == "" {
		t.Skip("needs an NVIDIA GPU and a VRAM-allocating command (CI has no GPU); run: KITH_REAL_NVML=1 KITH_REAL_NVML_HOG='exec python3 testdata/vram_hog.py' go test -run RealNVMLSeesOther -v ./gpu")
	}
	inv, err := OpenNVML()
	if err != nil {
		t.Fatalf("OpenNVML: %v", err)
	}
	defer inv.Close()
	l := NewLedger(inv, 512, nil)
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	before := l.Room()[0].CapacityMiB
	hogMiB := before / 2
	t.Logf("GPU 0 capacity before: %d MiB; the other process takes %d MiB", before, hogMiB)

	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, "sh", "-c", hog)
	cmd.Env = append(os.Environ(), fmt.Sprintf("HOG_MIB=%d", hogMiB))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("hog said %q, %v", line, err)
	}

	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	during := l.Room()[0].CapacityMiB
	t.Logf("GPU 0 capacity while the other process holds its memory: %d MiB", during)
	if during+hogMiB*9/10 > before {
		t.Fatalf("capacity %d MiB → %d MiB: the ledger did not see the other process's %d MiB", before, during, hogMiB)
	}
	// A peer asking for what was free before is refused now.
	if _, err := l.Grant(LeaseRequest{Owner: "peer", VRAMMiB: before}); !errors.Is(err, ErrInsufficientVRAM) {
		t.Fatalf("remote grant of %d MiB with %d MiB left: %v, want ErrInsufficientVRAM", before, during, err)
	}
	// What is left goes to a peer, and local work takes it back.
	remote, err := l.Grant(LeaseRequest{Owner: "peer", VRAMMiB: during})
	if err != nil {
		t.Fatalf("remote grant of the %d MiB left: %v", during, err)
	}
	local, err := l.Grant(LeaseRequest{Owner: "local", VRAMMiB: during, Local: true})
	if err != nil {
		t.Fatalf("local grant over a remote lease: %v", err)
	}
	if !errors.Is(remote.Err(), ErrPreempted) {
		t.Fatalf("remote lease after local grant: %v, want ErrPreempted", remote.Err())
	}
	local.Release()

	cancel()
	_ = cmd.Wait()
	labtest.WaitFor(t, 30*time.Second, "the other process's memory back in the ledger", func() bool {
		return l.Refresh() == nil && l.Room()[0].CapacityMiB+hogMiB/10 >= before
	})
	t.Logf("GPU 0 capacity after the other process exited: %d MiB", l.Room()[0].CapacityMiB)
}
