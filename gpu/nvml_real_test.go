//go:build cgo

package gpu

import (
	"os"
	"testing"
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
