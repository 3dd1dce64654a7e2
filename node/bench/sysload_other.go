//go:build !linux

package bench

// systemCPU is unknown off Linux.
func systemCPU() (float64, bool) { return 0, false }
