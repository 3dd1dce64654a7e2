//go:build cgo

package gpu

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// mockGPU is one device of a mock NVML; fail, when set, is returned by
// its memory query.
type mockGPU struct {
	uuid, name        string
	total, used, free uint64 // bytes
	fail              nvml.Return
}

// mockNVML is a mock.Interface over devs that counts Init and Shutdown.
type mockNVML struct {
	*mock.Interface
	inits, shutdowns atomic.Int32
}

func newMockNVML(devs ...mockGPU) *mockNVML {
	m := &mockNVML{}
	m.Interface = &mock.Interface{
		InitFunc:     func() nvml.Return { m.inits.Add(1); return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { m.shutdowns.Add(1); return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) {
			return len(devs), nvml.SUCCESS
		},
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			d := devs[i]
			return &mock.Device{
				GetUUIDFunc: func() (string, nvml.Return) { return d.uuid, nvml.SUCCESS },
				GetNameFunc: func() (string, nvml.Return) { return d.name, nvml.SUCCESS },
				GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
					if d.fail != nvml.SUCCESS {
						return nvml.Memory{}, d.fail
					}
					return nvml.Memory{Total: d.total, Used: d.used, Free: d.free}, nvml.SUCCESS
				},
			}, nvml.SUCCESS
		},
	}
	return m
}

const gib = 1 << 30

func TestNVMLTwoDevices(t *testing.T) {
	m := newMockNVML(
		mockGPU{uuid: "GPU-aaaa", name: "NVIDIA GeForce RTX 4090", total: 24 * gib, used: 2 * gib, free: 22 * gib},
		mockGPU{uuid: "GPU-bbbb", name: "NVIDIA RTX A4000", total: 16 * gib, used: gib + mib/2, free: 15*gib - mib/2},
	)
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	devs, err := inv.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA GeForce RTX 4090", TotalMiB: 24576, UsedMiB: 2048, FreeMiB: 22528},
		// Partial MiB round down: free memory is never overstated.
		{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA RTX A4000", TotalMiB: 16384, UsedMiB: 1024, FreeMiB: 15359},
	}
	if len(devs) != len(want) {
		t.Fatalf("Devices = %+v, want %+v", devs, want)
	}
	for i := range want {
		if devs[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, devs[i], want[i])
		}
	}
	if p := inv.Problems(); len(p) != 0 {
		t.Errorf("Problems = %v, want none", p)
	}
	if got := Describe(inv); !strings.Contains(got, "total: 2 devices, 40960 MiB total") {
		t.Errorf("Describe:\n%s", got)
	}
}

func TestNVMLFailingDeviceSkipped(t *testing.T) {
	m := newMockNVML(
		mockGPU{uuid: "GPU-aaaa", name: "good", total: 8 * gib, free: 8 * gib},
		mockGPU{uuid: "GPU-lost", name: "lost", fail: nvml.ERROR_GPU_IS_LOST},
		mockGPU{uuid: "GPU-cccc", name: "good too", total: 4 * gib, free: 3 * gib, used: gib},
	)
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	devs, err := inv.Devices()
	if err != nil {
		t.Fatalf("one failing device must not fail Devices: %v", err)
	}
	if len(devs) != 2 || devs[0].UUID != "GPU-aaaa" || devs[1].UUID != "GPU-cccc" || devs[1].Index != 2 {
		t.Fatalf("Devices = %+v, want GPU-aaaa (0) and GPU-cccc (2)", devs)
	}
	p := inv.Problems()
	if len(p) != 1 || p[0].Index != 1 || !strings.Contains(p[0].Reason, "ERROR_GPU_IS_LOST") {
		t.Fatalf("Problems = %+v, want device 1 with ERROR_GPU_IS_LOST", p)
	}
	if got := Describe(inv); !strings.Contains(got, "GPU 1: skipped (get memory info: ERROR_GPU_IS_LOST)") {
		t.Errorf("Describe does not show the skipped device:\n%s", got)
	}
}

func TestNVMLAllDevicesFail(t *testing.T) {
	m := newMockNVML(mockGPU{uuid: "GPU-lost", fail: nvml.ERROR_GPU_IS_LOST})
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if _, err := inv.Devices(); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "ERROR_GPU_IS_LOST") {
		t.Fatalf("Devices = %v, want ErrNoGPU naming ERROR_GPU_IS_LOST", err)
	}
}

func TestNVMLInitFails(t *testing.T) {
	tests := []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "driver not loaded"},
		{nvml.ERROR_NO_PERMISSION, "ERROR_NO_PERMISSION"},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String(), func(t *testing.T) {
			m := newMockNVML(mockGPU{uuid: "GPU-aaaa", total: gib, free: gib})
			m.InitFunc = func() nvml.Return { return tt.ret }
			inv, err := openNVML(m)
			if inv != nil || !errors.Is(err, ErrNoGPU) {
				t.Fatalf("openNVML = %v, %v; want nil, ErrNoGPU", inv, err)
			}
			var ng *NoGPUError
			if !errors.As(err, &ng) || !strings.Contains(ng.Reason, tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			// With the real library, Shutdown after a failed Init kills
			// the process (undefined symbol); it must not be called.
			if n := m.shutdowns.Load(); n != 0 {
				t.Fatalf("Shutdown called %d times after a failed Init", n)
			}
		})
	}
}

func TestNVMLNoDevices(t *testing.T) {
	m := newMockNVML()
	if _, err := openNVML(m); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "no devices") {
		t.Fatalf("openNVML = %v, want ErrNoGPU (no devices)", err)
	}
	if n := m.shutdowns.Load(); n != 1 {
		t.Fatalf("Shutdown called %d times, want 1 (Init succeeded)", n)
	}
}

// A binding that panics (here: a mock method left nil) fails soft.
func TestNVMLPanicRecovered(t *testing.T) {
	m := newMockNVML(mockGPU{uuid: "GPU-aaaa", total: gib, free: gib})
	m.DeviceGetCountFunc = nil
	if _, err := openNVML(m); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("openNVML = %v, want ErrNoGPU (panicked)", err)
	}
	if n := m.shutdowns.Load(); n != 1 {
		t.Fatalf("Shutdown called %d times after a panic past Init, want 1", n)
	}

	m = newMockNVML(mockGPU{uuid: "GPU-aaaa", total: gib, free: gib}, mockGPU{uuid: "GPU-bbbb", total: gib, free: gib})
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	get := m.DeviceGetHandleByIndexFunc
	m.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 0 {
			return &mock.Device{}, nvml.SUCCESS // every method nil: panics
		}
		return get(i)
	}
	devs, err := inv.Devices()
	if err != nil || len(devs) != 1 || devs[0].UUID != "GPU-bbbb" {
		t.Fatalf("Devices = %+v, %v; want only GPU-bbbb", devs, err)
	}
	if p := inv.Problems(); len(p) != 1 || !strings.Contains(p[0].Reason, "panicked") {
		t.Fatalf("Problems = %+v", p)
	}
}

func TestNVMLCloseCallsShutdown(t *testing.T) {
	m := newMockNVML(mockGPU{uuid: "GPU-aaaa", total: gib, free: gib})
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if i, s := m.inits.Load(), m.shutdowns.Load(); i != 1 || s != 1 {
		t.Fatalf("Init %d, Shutdown %d times; want 1 and 1", i, s)
	}
	// After Shutdown the real library is unloaded: no call may reach it.
	if _, err := inv.Devices(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Devices after Close = %v, want ErrClosed", err)
	}
}

func TestNVMLShutdownError(t *testing.T) {
	m := newMockNVML(mockGPU{uuid: "GPU-aaaa", total: gib, free: gib})
	m.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	inv, err := openNVML(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.Close(); err == nil || !strings.Contains(err.Error(), "ERROR_UNKNOWN") {
		t.Fatalf("Close = %v, want the shutdown error", err)
	}
}

// The real go-nvml path with a library that cannot be loaded: this is what
// every machine without the NVIDIA driver sees, made certain even on one
// that has it.
func TestOpenNVMLLibraryMissing(t *testing.T) {
	inv, err := openNVML(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")))
	if inv != nil || !errors.Is(err, ErrNoGPU) {
		t.Fatalf("openNVML = %v, %v; want nil, ErrNoGPU", inv, err)
	}
	if !strings.Contains(err.Error(), "not found") {
		t.Fatalf("error %q does not say the library was not found", err)
	}
}

// OpenNVML on this machine: without the driver (CI, developer machines) it
// must fail soft with ErrNoGPU, not panic or exit.
func TestOpenNVMLHere(t *testing.T) {
	inv, err := OpenNVML()
	if err == nil {
		devs, derr := inv.Devices()
		inv.Close()
		t.Skipf("this machine has NVML (%d devices, %v); TestRealNVML covers it", len(devs), derr)
	}
	if !errors.Is(err, ErrNoGPU) {
		t.Fatalf("OpenNVML = %v, want ErrNoGPU", err)
	}
	t.Logf("OpenNVML: %v", err)
	if got := Describe(failingInventory{err}); !strings.HasPrefix(got, "no NVIDIA GPU (") {
		t.Fatalf("Describe = %q", got)
	}
}

type failingInventory struct{ err error }

func (f failingInventory) Devices() ([]Device, error) { return nil, f.err }
