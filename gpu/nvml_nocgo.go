//go:build !cgo

package gpu

// NVMLInventory is a stub: NVML needs cgo, and this binary was built
// without it.
type NVMLInventory struct{}

// OpenNVML always fails with ErrNoGPU in a build without cgo.
func OpenNVML() (*NVMLInventory, error) {
	return nil, noGPU("kith was built without cgo, which NVML needs")
}

// Devices returns ErrClosed; an NVMLInventory is never open without cgo.
func (n *NVMLInventory) Devices() ([]Device, error) { return nil, ErrClosed }

// Problems returns nothing.
func (n *NVMLInventory) Problems() []DeviceProblem { return nil }

// Close does nothing.
func (n *NVMLInventory) Close() error { return nil }
