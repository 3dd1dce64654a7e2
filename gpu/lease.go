package gpu

import "time"

// ReasonPreempted is Lease.Reason for a lease revoked to make room for
// local work.
const ReasonPreempted = "preempted by local work"

// ReasonReleased is Lease.Reason once the holder released the lease.
const ReasonReleased = "released"

// LeaseRequest asks a Ledger for VRAM on one device.
type LeaseRequest struct {
	// Owner names the holder for `kith gpu` and logs (a delegation ID, a
	// local task); the ledger does not interpret it.
	Owner string
	// VRAMMiB is the memory the work needs on a single device; it must be
	// more than 0.
	VRAMMiB uint64
	// Local marks the node's own work: it may preempt remote leases and is
	// never preempted itself.
	Local bool
}

type leaseState uint8

const (
	leaseActive leaseState = iota
	leaseReleased
	leaseRevoked
)

// Lease is VRAM granted on one device. The holder must call Release when
// its work ends, and should watch Revoked: a remote lease can be taken back
// for local work, and the work must then stop and free its memory.
type Lease struct {
	ledger  *Ledger
	slot    *slot
	id      uint64
	owner   string
	mib     uint64
	local   bool
	device  Device // as the inventory reported it at grant time
	granted time.Time
	revoked chan struct{}

	// guarded by ledger.mu
	state leaseState
}

// LeaseInfo is a snapshot of an active lease, for `kith gpu`.
type LeaseInfo struct {
	ID          uint64 // grant order within the ledger; higher is newer
	Owner       string
	VRAMMiB     uint64
	Local       bool
	Device      string // the device's UUID
	DeviceIndex int
	GrantedAt   time.Time
}

// ID is the lease's grant number in its ledger; higher is newer.
func (ls *Lease) ID() uint64 { return ls.id }

// Owner is LeaseRequest.Owner.
func (ls *Lease) Owner() string { return ls.owner }

// VRAMMiB is the memory granted.
func (ls *Lease) VRAMMiB() uint64 { return ls.mib }

// Local reports whether the lease is for the node's own work.
func (ls *Lease) Local() bool { return ls.local }

// Device is the device the lease is on, as the inventory last reported it
// before the grant. Its UUID is what a DelegationAccept names.
func (ls *Lease) Device() Device { return ls.device }

// GrantedAt is when the ledger granted the lease, by its clock.
func (ls *Lease) GrantedAt() time.Time { return ls.granted }

// Revoked is closed when the ledger takes the lease back for local work.
// It is not closed by Release.
func (ls *Lease) Revoked() <-chan struct{} { return ls.revoked }

// Reason is "" while the lease holds, ReasonReleased after Release and
// ReasonPreempted after revocation.
func (ls *Lease) Reason() string {
	ls.ledger.mu.Lock()
	defer ls.ledger.mu.Unlock()
	switch ls.state {
	case leaseReleased:
		return ReasonReleased
	case leaseRevoked:
		return ReasonPreempted
	}
	return ""
}

// Err is nil while the lease holds and after Release, and an error matching
// ErrPreempted once the ledger revoked it.
func (ls *Lease) Err() error {
	ls.ledger.mu.Lock()
	defer ls.ledger.mu.Unlock()
	if ls.state == leaseRevoked {
		return ErrPreempted
	}
	return nil
}

// Release returns the lease's VRAM to the ledger. It is idempotent, and a
// no-op on a revoked lease (whose VRAM the ledger already took back).
func (ls *Lease) Release() {
	l := ls.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if ls.state != leaseActive {
		return
	}
	ls.state = leaseReleased
	l.removeLocked(ls)
	l.afterOpLocked()
}

// Info is a snapshot of the lease.
func (ls *Lease) Info() LeaseInfo {
	return LeaseInfo{
		ID:          ls.id,
		Owner:       ls.owner,
		VRAMMiB:     ls.mib,
		Local:       ls.local,
		Device:      ls.device.UUID,
		DeviceIndex: ls.device.Index,
		GrantedAt:   ls.granted,
	}
}
