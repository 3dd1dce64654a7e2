// Package gpu owns what a kith node knows about its own NVIDIA GPUs and the
// VRAM lease ledger that keeps delegated work from taking memory the node's
// own work needs.
//
// # Inventory
//
// An [Inventory] lists devices with their total, used and free memory.
// [OpenNVML] reads them from NVML (libnvidia-ml, loaded at run time); on a
// machine without the NVIDIA driver it fails soft with an error that
// matches [ErrNoGPU] and never crashes the node (a build without cgo, which
// go-nvml needs, always reports ErrNoGPU). [Fake] and [Static] stand
// in for NVML in tests and on nodes whose VRAM is declared by hand, and
// [Describe] renders an inventory as text for `kith gpu`.
//
// # Leases
//
// A [Ledger] grants [Lease]s of VRAM, each on exactly one device (a model
// cannot span GPUs), against the free memory the inventory reported at the
// last [Ledger.Refresh], less a headroom kept free on every device, less the
// leases already granted there. It never oversubscribes a device: memory
// that granted work has already allocated is counted twice (once as used by
// NVML, once as leased) until that lease is released and the ledger
// refreshed, which errs on the side of refusing.
//
// Local work has priority (DESIGN.md, "Admission and resource protection").
// A remote request that does not fit fails with [ErrInsufficientVRAM]. A
// local request that does not fit revokes remote leases, newest first, on
// the one device where that takes the fewest; each revoked lease's
// [Lease.Revoked] channel closes so the provider can report the delegation
// as preempted. Local leases are never revoked, and when even revoking every
// remote lease would not make room, nothing is revoked.
//
// The package imports no other kith package.
package gpu
