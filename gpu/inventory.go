package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Device is one GPU as an inventory saw it. Memory is in MiB (2^20 bytes),
// rounded down.
type Device struct {
	Index    int    // the driver's index (nvidia-smi's)
	UUID     string // stable across reboots and index changes, e.g. "GPU-<uuid>"
	Name     string // product name, for people
	TotalMiB uint64
	UsedMiB  uint64
	FreeMiB  uint64
}

// Inventory lists the GPUs of this machine. An implementation with no
// usable GPU returns an error that matches ErrNoGPU.
type Inventory interface {
	Devices() ([]Device, error)
}

// DeviceProblem is a device an inventory saw but could not query; it was
// left out of the last Devices answer.
type DeviceProblem struct {
	Index  int
	Reason string
}

// problemReporter is implemented by inventories that skip devices.
type problemReporter interface {
	Problems() []DeviceProblem
}

// Fake is an Inventory of fixed devices, for tests and for nodes that
// declare their VRAM by hand. Set and SetErr change what it reports; it is
// safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	devices []Device
	err     error
}

// NewFake returns a Fake that reports devs.
func NewFake(devs ...Device) *Fake {
	return &Fake{devices: slices.Clone(devs)}
}

// Static is a Fake with one device of totalMiB, all of it free: a node that
// declares its VRAM in config instead of asking NVML.
func Static(totalMiB uint64) *Fake {
	return NewFake(Device{Index: 0, UUID: "static-0", Name: "declared VRAM", TotalMiB: totalMiB, FreeMiB: totalMiB})
}

// Devices returns a copy of the devices, or the error set by SetErr.
func (f *Fake) Devices() ([]Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return slices.Clone(f.devices), nil
}

// Set replaces the devices the Fake reports.
func (f *Fake) Set(devs ...Device) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.devices = slices.Clone(devs)
}

// SetErr makes Devices fail with err (nil to stop failing).
func (f *Fake) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Describe renders inv for people (`kith gpu`): one block per device, the
// devices that could not be queried, and the totals. Without a GPU it says
// "no NVIDIA GPU (reason)".
func Describe(inv Inventory) string {
	devs, err := inv.Devices()
	var b strings.Builder
	if err != nil {
		var ng *NoGPUError
		switch {
		case errors.As(err, &ng):
			fmt.Fprintf(&b, "no NVIDIA GPU (%s)\n", ng.Reason)
		case errors.Is(err, ErrNoGPU):
			fmt.Fprintf(&b, "no NVIDIA GPU (%v)\n", err)
		default:
			fmt.Fprintf(&b, "GPU inventory failed: %v\n", err)
		}
		return b.String()
	}
	var total, used, free uint64
	for _, d := range devs {
		name := d.Name
		if name == "" {
			name = "unnamed device"
		}
		fmt.Fprintf(&b, "GPU %d: %s", d.Index, name)
		if d.UUID != "" {
			fmt.Fprintf(&b, " (%s)", d.UUID)
		}
		fmt.Fprintf(&b, "\n  memory: %d MiB total, %d MiB used, %d MiB free\n", d.TotalMiB, d.UsedMiB, d.FreeMiB)
		total += d.TotalMiB
		used += d.UsedMiB
		free += d.FreeMiB
	}
	var problems []DeviceProblem
	if pr, ok := inv.(problemReporter); ok {
		problems = pr.Problems()
	}
	for _, p := range problems {
		fmt.Fprintf(&b, "GPU %d: skipped (%s)\n", p.Index, p.Reason)
	}
	fmt.Fprintf(&b, "total: %d %s, %d MiB total, %d MiB used, %d MiB free\n",
		len(devs), plural(len(devs), "device", "devices"), total, used, free)
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
