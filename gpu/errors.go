package gpu

import "errors"

// Sentinel errors; test with errors.Is. The wrapping text says which device,
// request or rule.
var (
	// ErrNoGPU: this machine has no usable NVIDIA GPU (no driver library,
	// no devices, NVML failed to initialise). Errors that match it are
	// *NoGPUError values carrying the reason.
	ErrNoGPU = errors.New("no NVIDIA GPU")
	// ErrInsufficientVRAM: no single device has room for the request, even
	// (for local requests) after revoking every remote lease on it.
	ErrInsufficientVRAM = errors.New("gpu: insufficient VRAM")
	// ErrPreempted: the lease was revoked to make room for local work.
	ErrPreempted = errors.New("gpu: lease preempted by local work")
	// ErrInvalidRequest: the lease request asks for nothing (0 MiB); a
	// delegation that needs no VRAM takes no lease.
	ErrInvalidRequest = errors.New("gpu: invalid lease request")
	// ErrClosed: the inventory has been closed.
	ErrClosed = errors.New("gpu: inventory closed")
)

// NoGPUError says why there is no usable GPU. It matches ErrNoGPU.
type NoGPUError struct {
	Reason string
}

func (e *NoGPUError) Error() string { return "no NVIDIA GPU: " + e.Reason }

// Is makes errors.Is(err, ErrNoGPU) true.
func (e *NoGPUError) Is(target error) bool { return target == ErrNoGPU }

func noGPU(reason string) error { return &NoGPUError{Reason: reason} }
