package gpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Ledger grants VRAM leases against an Inventory. It is safe for concurrent
// use; every decision is made under one mutex, so concurrent requests can
// never together oversubscribe a device.
//
// Each device's capacity is its FreeMiB at the last Refresh less the
// headroom; a lease must fit in what its device's capacity leaves after the
// leases already granted there.
type Ledger struct {
	inv      Inventory
	headroom uint64
	now      func() time.Time

	mu        sync.Mutex
	refreshed bool
	lastErr   error   // from the last Refresh
	slots     []*slot // in inventory order
	active    []*Lease
	nextID    uint64
	// afterOp, when set (by tests), runs with mu held after every change.
	afterOp func()
}

// slot is the ledger's view of one device.
type slot struct {
	dev      Device
	key      string
	capacity uint64 // FreeMiB at the last Refresh, less headroom
	leased   uint64 // sum of the active leases on the device
	// gone: the device was missing from the last inventory. It keeps its
	// leases until they end but takes no new ones.
	gone bool
}

func (s *slot) available() uint64 {
	if s.gone || s.leased >= s.capacity {
		return 0
	}
	return s.capacity - s.leased
}

func deviceKey(d Device) string {
	if d.UUID != "" {
		return d.UUID
	}
	return fmt.Sprintf("index:%d", d.Index)
}

// DeviceRoom is one device's place in the ledger, for `kith gpu`.
type DeviceRoom struct {
	Device       Device // as last reported by the inventory
	CapacityMiB  uint64 // FreeMiB at the last refresh, less headroom
	LeasedMiB    uint64
	AvailableMiB uint64 // what a new lease could get without preemption
	Gone         bool   // missing from the last inventory; kept for its leases
}

// NewLedger returns a ledger over inv that keeps headroomMiB free on every
// device. now is its clock (nil means time.Now). It does no I/O: the
// inventory is read by the first Refresh, which the first Grant makes if
// nobody called Refresh before.
func NewLedger(inv Inventory, headroomMiB uint64, now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{inv: inv, headroom: headroomMiB, now: now, nextID: 1}
}

// Refresh re-reads the inventory and resets each device's capacity to its
// free memory less headroom. Existing leases are kept: a device missing from
// the new answer keeps its leases (but gets no new ones) until they end, and
// when the inventory fails the previous view stays and the error is
// returned.
func (l *Ledger) Refresh() error {
	devs, err := l.inv.Devices() // outside the lock: NVML may be slow
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshed = true
	l.lastErr = err
	if err != nil {
		return fmt.Errorf("gpu: ledger refresh: %w", err)
	}
	old := make(map[string]*slot, len(l.slots))
	for _, s := range l.slots {
		old[s.key] = s
	}
	slots := make([]*slot, 0, len(devs))
	for _, d := range devs {
		k := deviceKey(d)
		s, ok := old[k]
		if !ok {
			s = &slot{key: k}
		}
		delete(old, k)
		s.dev, s.gone = d, false
		s.capacity = 0
		if d.FreeMiB > l.headroom {
			s.capacity = d.FreeMiB - l.headroom
		}
		slots = append(slots, s)
	}
	for _, s := range l.slots { // keep vanished devices' order stable
		if _, vanished := old[s.key]; vanished && s.leased > 0 {
			s.gone = true
			slots = append(slots, s)
		}
	}
	l.slots = slots
	l.afterOpLocked()
	return nil
}

// Grant leases req.VRAMMiB on the device with the most room. A remote
// request that fits nowhere fails with ErrInsufficientVRAM. A local request
// that fits nowhere revokes remote leases, newest first, on the device where
// that revokes the fewest; if no device would have room even without any
// remote lease, it fails with ErrInsufficientVRAM and revokes nothing.
func (l *Ledger) Grant(req LeaseRequest) (*Lease, error) {
	if req.VRAMMiB == 0 {
		return nil, fmt.Errorf("%w: %q asks for 0 MiB", ErrInvalidRequest, req.Owner)
	}
	l.mu.Lock()
	refreshed := l.refreshed
	l.mu.Unlock()
	if !refreshed {
		_ = l.Refresh() // a failure leaves no devices; Grant says so below
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.roomiestLocked(req.VRAMMiB)
	var victims []*Lease
	if s == nil && req.Local {
		s, victims = l.preemptionPlanLocked(req.VRAMMiB)
	}
	if s == nil {
		return nil, l.insufficientLocked(req)
	}
	for _, v := range victims {
		v.state = leaseRevoked
		l.removeLocked(v)
		close(v.revoked)
	}
	ls := &Lease{
		ledger:  l,
		slot:    s,
		id:      l.nextID,
		owner:   req.Owner,
		mib:     req.VRAMMiB,
		local:   req.Local,
		device:  s.dev,
		granted: l.now(),
		revoked: make(chan struct{}),
	}
	l.nextID++
	s.leased += ls.mib
	l.active = append(l.active, ls) // ids only grow, so active stays sorted
	l.afterOpLocked()
	return ls, nil
}

// roomiestLocked returns the device with the most room that fits mib.
func (l *Ledger) roomiestLocked(mib uint64) *slot {
	var best *slot
	for _, s := range l.slots {
		if a := s.available(); a >= mib && (best == nil || a > best.available()) {
			best = s
		}
	}
	return best
}

// preemptionPlanLocked finds, for a local request, the device and the remote
// leases to revoke there (newest first) to fit mib. Among devices that can
// make room it picks the fewest revocations, then the one whose oldest
// victim is newest (the least work thrown away), then inventory order.
func (l *Ledger) preemptionPlanLocked(mib uint64) (*slot, []*Lease) {
	var best *slot
	var bestVictims []*Lease
	for _, s := range l.slots {
		if s.gone {
			continue
		}
		var victims []*Lease
		var freed uint64
		// Room once the victims are gone: capacity less what stays leased.
		room := func() uint64 {
			if still := s.leased - freed; still < s.capacity {
				return s.capacity - still
			}
			return 0
		}
		for i := len(l.active) - 1; i >= 0 && room() < mib; i-- {
			if ls := l.active[i]; ls.slot == s && !ls.local {
				victims = append(victims, ls)
				freed += ls.mib
			}
		}
		if room() < mib {
			continue
		}
		if best == nil || betterPlan(victims, bestVictims) {
			best, bestVictims = s, victims
		}
	}
	return best, bestVictims
}

func betterPlan(a, b []*Lease) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	if len(a) == 0 {
		return false
	}
	// Victims are newest first, so the last is the oldest.
	return a[len(a)-1].id > b[len(b)-1].id
}

func (l *Ledger) insufficientLocked(req LeaseRequest) error {
	kind := "remote"
	if req.Local {
		kind = "local"
	}
	if len(l.slots) == 0 {
		why := "inventory not read"
		if l.lastErr != nil {
			why = l.lastErr.Error()
		} else if l.refreshed {
			why = "inventory lists no devices"
		}
		return fmt.Errorf("%w: %s request of %d MiB for %q: no GPU (%s)",
			ErrInsufficientVRAM, kind, req.VRAMMiB, req.Owner, why)
	}
	var room, ceiling uint64 // best room now; best room with no remote lease
	for _, s := range l.slots {
		room = max(room, s.available())
		if !s.gone {
			var local uint64
			for _, ls := range l.active {
				if ls.slot == s && ls.local {
					local += ls.mib
				}
			}
			if local < s.capacity {
				ceiling = max(ceiling, s.capacity-local)
			}
		}
	}
	if req.Local {
		return fmt.Errorf("%w: local request of %d MiB for %q: at most %d MiB on one device even after preempting every remote lease (headroom %d MiB per device)",
			ErrInsufficientVRAM, req.VRAMMiB, req.Owner, ceiling, l.headroom)
	}
	return fmt.Errorf("%w: remote request of %d MiB for %q: at most %d MiB free on one device (headroom %d MiB per device)",
		ErrInsufficientVRAM, req.VRAMMiB, req.Owner, room, l.headroom)
}

// removeLocked takes an active lease out of the books.
func (l *Ledger) removeLocked(ls *Lease) {
	i, ok := slices.BinarySearchFunc(l.active, ls.id, func(a *Lease, id uint64) int { return cmp.Compare(a.id, id) })
	if !ok {
		panic("gpu: lease not in ledger") // a bug in this file, not a caller's mistake
	}
	l.active = slices.Delete(l.active, i, i+1)
	s := ls.slot
	s.leased -= ls.mib
	if s.gone && s.leased == 0 {
		l.slots = slices.DeleteFunc(l.slots, func(x *slot) bool { return x == s })
	}
}

func (l *Ledger) afterOpLocked() {
	if l.afterOp != nil {
		l.afterOp()
	}
}

// Leases returns the active leases, oldest first.
func (l *Ledger) Leases() []LeaseInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]LeaseInfo, len(l.active))
	for i, ls := range l.active {
		out[i] = ls.Info()
	}
	return out
}

// Room returns each device's capacity, leased and available memory.
func (l *Ledger) Room() []DeviceRoom {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]DeviceRoom, len(l.slots))
	for i, s := range l.slots {
		out[i] = DeviceRoom{Device: s.dev, CapacityMiB: s.capacity, LeasedMiB: s.leased, AvailableMiB: s.available(), Gone: s.gone}
	}
	return out
}

// checkLocked verifies the books: each device's leased sum matches its
// active leases and stays within capacity (which holds while the inventory
// does not shrink), and active is in grant order with only active leases.
func (l *Ledger) checkLocked() error {
	sums := make(map[*slot]uint64)
	var errs []error
	var prev uint64
	for _, ls := range l.active {
		if ls.state != leaseActive {
			errs = append(errs, fmt.Errorf("lease %d in books but not active", ls.id))
		}
		if ls.id <= prev {
			errs = append(errs, fmt.Errorf("lease %d after %d: not in grant order", ls.id, prev))
		}
		prev = ls.id
		sums[ls.slot] += ls.mib
	}
	for _, s := range l.slots {
		if sums[s] != s.leased {
			errs = append(errs, fmt.Errorf("device %s: leased %d MiB, leases sum to %d", s.key, s.leased, sums[s]))
		}
		if s.leased > s.capacity {
			errs = append(errs, fmt.Errorf("device %s: leased %d MiB over capacity %d", s.key, s.leased, s.capacity))
		}
		delete(sums, s)
	}
	for s, n := range sums {
		errs = append(errs, fmt.Errorf("%d MiB leased on device %s that the ledger no longer tracks", n, s.key))
	}
	return errors.Join(errs...)
}
