//go:build cgo

package gpu

import (
	"fmt"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const mib = 1 << 20

// NVMLInventory reads devices from NVML. It is safe for concurrent use.
//
// go-nvml resolves NVML's C symbols only when libnvidia-ml is loaded: any
// call other than Init made while the library is not loaded (before a
// successful Init, or after Shutdown) kills the process with "undefined
// symbol", which no recover catches. So every call goes through lib only
// while open is true, under mu.
type NVMLInventory struct {
	mu       sync.Mutex
	lib      nvml.Interface
	open     bool
	problems []DeviceProblem
}

// OpenNVML loads libnvidia-ml and initialises NVML. Without the driver
// library, or without devices, it returns an error that matches ErrNoGPU
// (a *NoGPUError with the reason) and leaves nothing to close.
func OpenNVML() (*NVMLInventory, error) {
	return openNVML(nvml.New())
}

// openNVML is OpenNVML over any nvml.Interface, so tests can pass
// github.com/NVIDIA/go-nvml/pkg/nvml/mock.
func openNVML(lib nvml.Interface) (inv *NVMLInventory, err error) {
	initialised := false
	defer func() {
		if r := recover(); r != nil {
			if initialised {
				shutdownQuietly(lib)
			}
			inv, err = nil, noGPU(fmt.Sprintf("NVML panicked during start: %v", r))
		}
	}()
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, noGPU("NVML library libnvidia-ml.so.1 not found; is the NVIDIA driver installed?")
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, noGPU("NVIDIA kernel driver not loaded")
	default:
		return nil, noGPU(fmt.Sprintf("NVML init failed: %v", ret))
	}
	initialised = true
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		shutdownQuietly(lib)
		return nil, noGPU(fmt.Sprintf("NVML device count failed: %v", ret))
	}
	if n == 0 {
		shutdownQuietly(lib)
		return nil, noGPU("NVML reports no devices")
	}
	return &NVMLInventory{lib: lib, open: true}, nil
}

func shutdownQuietly(lib nvml.Interface) {
	defer func() { _ = recover() }()
	_ = lib.Shutdown()
}

// Devices queries every device. A device whose query fails is left out and
// its reason kept for Problems; only when no device answers does Devices
// fail (with an error matching ErrNoGPU).
func (n *NVMLInventory) Devices() ([]Device, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.open {
		return nil, ErrClosed
	}
	count, ret := n.deviceCount()
	if ret != nvml.SUCCESS {
		return nil, noGPU(fmt.Sprintf("NVML device count failed: %v", ret))
	}
	var devs []Device
	var problems []DeviceProblem
	for i := range count {
		d, err := n.device(i)
		if err != nil {
			problems = append(problems, DeviceProblem{Index: i, Reason: err.Error()})
			continue
		}
		devs = append(devs, d)
	}
	n.problems = problems
	if len(devs) == 0 {
		reason := "NVML reports no devices"
		if len(problems) > 0 {
			reason = fmt.Sprintf("none of %d devices answered; first: GPU %d: %s", count, problems[0].Index, problems[0].Reason)
		}
		return nil, noGPU(reason)
	}
	return devs, nil
}

// Problems returns the devices the last Devices call left out, and why.
func (n *NVMLInventory) Problems() []DeviceProblem {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.problems)
}

// Close shuts NVML down. It is idempotent; after it Devices returns
// ErrClosed.
func (n *NVMLInventory) Close() (err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.open {
		return nil
	}
	n.open = false
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gpu: NVML shutdown panicked: %v", r)
		}
	}()
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: NVML shutdown: %v", ret)
	}
	return nil
}

func (n *NVMLInventory) deviceCount() (count int, ret nvml.Return) {
	defer func() {
		if r := recover(); r != nil {
			count, ret = 0, nvml.ERROR_UNKNOWN
		}
	}()
	return n.lib.DeviceGetCount()
}

// device queries one device; a panic in a binding becomes that device's
// problem rather than the node's.
func (n *NVMLInventory) device(i int) (d Device, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("NVML panicked: %v", r)
		}
	}()
	h, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get handle: %v", ret)
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get UUID: %v", ret)
	}
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get name: %v", ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get memory info: %v", ret)
	}
	return Device{
		Index:    i,
		UUID:     uuid,
		Name:     name,
		TotalMiB: mem.Total / mib,
		UsedMiB:  mem.Used / mib,
		FreeMiB:  mem.Free / mib,
	}, nil
}
