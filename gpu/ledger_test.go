package gpu

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func gpuFree(index int, freeMiB uint64) Device {
	return Device{Index: index, UUID: "GPU-" + string(rune('a'+index)), Name: "test GPU", TotalMiB: freeMiB, FreeMiB: freeMiB}
}

// newTestLedger returns a refreshed ledger whose books are checked after
// every change.
func newTestLedger(t *testing.T, inv Inventory, headroom uint64, now func() time.Time) *Ledger {
	t.Helper()
	l := NewLedger(inv, headroom, now)
	l.afterOp = func() {
		if err := l.checkLocked(); err != nil {
			t.Errorf("ledger books inconsistent: %v", err)
		}
	}
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	return l
}

// step is one operation of a ledger scenario: a grant (name, mib, local)
// expecting either wantErr or a lease on device wantDev and revoking exactly
// the named leases; or a release of a named lease.
type step struct {
	grant, release string
	mib            uint64
	local          bool
	wantErr        error
	wantDev        int
	revokes        []string
}

func remote(name string, mib uint64, dev int) step {
	return step{grant: name, mib: mib, wantDev: dev}
}

func local(name string, mib uint64, dev int, revokes ...string) step {
	return step{grant: name, mib: mib, local: true, wantDev: dev, revokes: revokes}
}

func refused(name string, mib uint64, isLocal bool) step {
	return step{grant: name, mib: mib, local: isLocal, wantErr: ErrInsufficientVRAM}
}

func release(name string) step { return step{release: name} }

func TestLedgerScenarios(t *testing.T) {
	tests := []struct {
		name     string
		devices  []Device
		headroom uint64
		steps    []step
	}{
		{"grant fits", []Device{gpuFree(0, 10000)}, 0, []step{
			remote("a", 4000, 0), remote("b", 6000, 0),
		}},
		{"exceed is refused", []Device{gpuFree(0, 10000)}, 0, []step{
			refused("big", 10001, false),
			remote("a", 7000, 0),
			refused("b", 3001, false),
			remote("c", 3000, 0),
			refused("d", 1, false),
		}},
		{"headroom kept free", []Device{gpuFree(0, 10000)}, 2000, []step{
			refused("a", 8001, false),
			refused("a-local", 8001, true),
			remote("b", 8000, 0),
			refused("c", 1, false),
		}},
		{"headroom larger than free", []Device{gpuFree(0, 1000)}, 2000, []step{
			refused("a", 1, false),
			refused("b", 1, true),
		}},
		{"release frees", []Device{gpuFree(0, 10000)}, 0, []step{
			remote("a", 6000, 0),
			refused("b", 5000, false),
			release("a"),
			release("a"), // idempotent: must not free twice
			remote("b", 5000, 0),
			remote("c", 5000, 0),
			refused("d", 1, false),
		}},
		{"lease on the device with most room", []Device{gpuFree(0, 4000), gpuFree(1, 9000)}, 0, []step{
			remote("a", 1000, 1), // 4000 vs 8000 left
			remote("b", 4000, 1), // 4000 vs 4000 left: tie goes to the first
			remote("c", 1000, 0),
		}},
		{"a lease never spans devices", []Device{gpuFree(0, 8000), gpuFree(1, 8000)}, 0, []step{
			remote("a", 5000, 0),
			remote("b", 5000, 1),
			refused("c", 4000, false), // 6000 free in all, 3000 on each
			remote("d", 3000, 0),
		}},
		{"local preempts newest remote first", []Device{gpuFree(0, 10000)}, 0, []step{
			remote("r1", 3000, 0), remote("r2", 3000, 0), remote("r3", 3000, 0),
			// 1000 free; r3 gives 4000, r2 gives 7000 >= 5000: r1 stays.
			local("L", 5000, 0, "r3", "r2"),
			remote("r4", 2000, 0),
			refused("r5", 1, false),
		}},
		{"remote never preempts", []Device{gpuFree(0, 10000)}, 0, []step{
			remote("r1", 6000, 0),
			refused("r2", 5000, false),
		}},
		{"local fits without preemption", []Device{gpuFree(0, 10000), gpuFree(1, 5000)}, 0, []step{
			remote("r1", 8000, 0),
			local("L", 4000, 1), // fits on device 1: r1 untouched
		}},
		{"local never revoked", []Device{gpuFree(0, 10000)}, 0, []step{
			local("L1", 6000, 0),
			remote("r1", 2000, 0),
			local("L2", 4000, 0, "r1"),
			refused("L3", 1000, true), // only local leases left
			release("L1"),
			local("L3", 1000, 0),
		}},
		{"insufficient overall revokes nothing", []Device{gpuFree(0, 10000)}, 0, []step{
			local("L1", 6000, 0),
			remote("r1", 2000, 0),
			remote("r2", 2000, 0),
			refused("L2", 5000, true), // 4000 at most even with r1 and r2 gone
			// r1 and r2 are still held: nothing is left for anyone.
			refused("r3", 1, false),
			local("L3", 2000, 0, "r2"),
		}},
		{"preempt on the device needing fewest revocations", []Device{gpuFree(0, 10000), gpuFree(1, 10000)}, 0, []step{
			remote("big", 9000, 0),
			remote("s1", 3000, 1), remote("s2", 3000, 1), remote("s3", 3000, 1),
			// Device 1's victims are newer, but would take two (s3, s2);
			// device 0 needs only "big".
			local("L", 7000, 0, "big"),
		}},
		{"equal revocations: throw away the least work", []Device{gpuFree(0, 10000), gpuFree(1, 10000)}, 0, []step{
			remote("r1", 5000, 0),
			remote("r2", 5000, 1),
			remote("r3", 3000, 0),
			remote("r4", 4000, 1),
			// Either device needs two revocations; device 1's oldest
			// victim (r2) is newer than device 0's (r1).
			local("L", 6000, 1, "r4", "r2"),
		}},
		{"no devices", nil, 0, []step{
			refused("a", 1, false),
			refused("b", 1, true),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newTestLedger(t, NewFake(tt.devices...), tt.headroom, nil)
			leases := map[string]*Lease{}
			for i, st := range tt.steps {
				if st.release != "" {
					leases[st.release].Release()
					continue
				}
				before := activeNames(leases)
				ls, err := l.Grant(LeaseRequest{Owner: st.grant, VRAMMiB: st.mib, Local: st.local})
				if st.wantErr != nil {
					if !errors.Is(err, st.wantErr) {
						t.Fatalf("step %d: Grant(%s, %d MiB) = %v, want %v", i, st.grant, st.mib, err, st.wantErr)
					}
					if after := activeNames(leases); !slices.Equal(before, after) {
						t.Fatalf("step %d: refused Grant(%s) changed leases %v -> %v", i, st.grant, before, after)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: Grant(%s, %d MiB): %v", i, st.grant, st.mib, err)
				}
				if ls.Device().Index != st.wantDev {
					t.Errorf("step %d: %s on device %d, want %d", i, st.grant, ls.Device().Index, st.wantDev)
				}
				var revoked []string
				for _, name := range before {
					if leases[name].Reason() == ReasonPreempted {
						revoked = append(revoked, name)
					}
				}
				want := slices.Sorted(slices.Values(st.revokes))
				if !slices.Equal(revoked, want) {
					t.Fatalf("step %d: Grant(%s) revoked %v, want %v", i, st.grant, revoked, want)
				}
				leases[st.grant] = ls
			}
			// Whatever was not released or revoked is still in the books.
			var wantActive []string
			for name, ls := range leases {
				if ls.Reason() == "" {
					wantActive = append(wantActive, name)
				}
				if ls.Local() && ls.Err() != nil {
					t.Errorf("local lease %s was revoked", name)
				}
			}
			var gotActive []string
			for _, li := range l.Leases() {
				gotActive = append(gotActive, li.Owner)
			}
			slices.Sort(wantActive)
			slices.Sort(gotActive)
			if !slices.Equal(gotActive, wantActive) {
				t.Errorf("Leases() owners = %v, want %v", gotActive, wantActive)
			}
		})
	}
}

// activeNames lists, sorted, the leases that are neither released nor
// revoked.
func activeNames(leases map[string]*Lease) []string {
	var out []string
	for name, ls := range leases {
		if ls.Reason() == "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func TestLeaseRevocation(t *testing.T) {
	l := newTestLedger(t, Static(10000), 0, nil)
	r, err := l.Grant(LeaseRequest{Owner: "remote", VRAMMiB: 8000})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Revoked():
		t.Fatal("Revoked closed on a live lease")
	default:
	}
	if r.Reason() != "" || r.Err() != nil {
		t.Fatalf("live lease: Reason %q, Err %v", r.Reason(), r.Err())
	}
	loc, err := l.Grant(LeaseRequest{Owner: "local", VRAMMiB: 5000, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Revoked():
	default:
		t.Fatal("Revoked not closed after preemption")
	}
	if r.Reason() != "preempted by local work" || !errors.Is(r.Err(), ErrPreempted) {
		t.Fatalf("revoked lease: Reason %q, Err %v", r.Reason(), r.Err())
	}
	r.Release() // no-op: the ledger already took it back
	if room := l.Room()[0]; room.LeasedMiB != 5000 || room.AvailableMiB != 5000 {
		t.Fatalf("after release of a revoked lease: %+v, want 5000 leased, 5000 available", room)
	}
	loc.Release()
	select {
	case <-loc.Revoked():
		t.Fatal("Release closed Revoked")
	default:
	}
	if loc.Reason() != ReasonReleased || loc.Err() != nil {
		t.Fatalf("released lease: Reason %q, Err %v", loc.Reason(), loc.Err())
	}
	if room := l.Room()[0]; room.LeasedMiB != 0 || room.AvailableMiB != 10000 {
		t.Fatalf("after all released: %+v", room)
	}
}

func TestLeasesSnapshot(t *testing.T) {
	clock := newFakeClock()
	l := newTestLedger(t, NewFake(gpuFree(0, 8000), gpuFree(1, 16000)), 1000, clock.Now)
	t0 := clock.Now()
	a, err := l.Grant(LeaseRequest{Owner: "deleg-1", VRAMMiB: 12000})
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	if _, err := l.Grant(LeaseRequest{Owner: "local-chat", VRAMMiB: 7000, Local: true}); err != nil {
		t.Fatal(err)
	}
	got := l.Leases()
	want := []LeaseInfo{
		{ID: 1, Owner: "deleg-1", VRAMMiB: 12000, Device: "GPU-b", DeviceIndex: 1, GrantedAt: t0},
		{ID: 2, Owner: "local-chat", VRAMMiB: 7000, Local: true, Device: "GPU-a", DeviceIndex: 0, GrantedAt: t0.Add(time.Minute)},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Leases() = %+v\nwant %+v", got, want)
	}
	if a.Info() != want[0] || a.ID() != 1 || a.Owner() != "deleg-1" || a.VRAMMiB() != 12000 || a.Local() || !a.GrantedAt().Equal(t0) {
		t.Fatalf("lease accessors disagree with %+v", want[0])
	}
	room := l.Room()
	if room[0].CapacityMiB != 7000 || room[0].AvailableMiB != 0 || room[1].CapacityMiB != 15000 || room[1].LeasedMiB != 12000 || room[1].AvailableMiB != 3000 {
		t.Fatalf("Room() = %+v", room)
	}
}

func TestRefreshKeepsLeases(t *testing.T) {
	inv := NewFake(gpuFree(0, 10000), gpuFree(1, 6000))
	l := NewLedger(inv, 0, nil)
	l.afterOp = func() {
		// Refresh may shrink capacity under granted leases; check only the sums.
		if err := l.checkLocked(); err != nil && !strings.Contains(err.Error(), "over capacity") {
			t.Errorf("ledger books inconsistent: %v", err)
		}
	}
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	a, err := l.Grant(LeaseRequest{Owner: "a", VRAMMiB: 4000})
	if err != nil || a.Device().Index != 0 {
		t.Fatalf("Grant: %v on %+v", err, a)
	}

	// The work behind "a" allocated its memory: NVML now reports less free.
	// The ledger keeps the lease and counts it again (conservative).
	inv.Set(Device{Index: 0, UUID: "GPU-a", TotalMiB: 10000, UsedMiB: 4000, FreeMiB: 6000}, gpuFree(1, 6000))
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := l.Leases(); len(got) != 1 || got[0].Owner != "a" {
		t.Fatalf("Leases after Refresh = %+v", got)
	}
	if r := l.Room()[0]; r.CapacityMiB != 6000 || r.LeasedMiB != 4000 || r.AvailableMiB != 2000 {
		t.Fatalf("device 0 after Refresh: %+v", r)
	}

	// A failing inventory keeps the previous view.
	inv.SetErr(noGPU("driver gone"))
	if err := l.Refresh(); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("Refresh = %v, want ErrNoGPU", err)
	}
	if len(l.Leases()) != 1 || len(l.Room()) != 2 {
		t.Fatal("failed Refresh dropped leases or devices")
	}
	inv.SetErr(nil)

	// Device 0 disappears: its lease stays, it takes no new lease, and it
	// leaves the books once its last lease ends.
	inv.Set(gpuFree(1, 6000))
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	room := l.Room()
	if len(room) != 2 || room[0].Device.UUID != "GPU-b" || !room[1].Gone || room[1].LeasedMiB != 4000 || room[1].AvailableMiB != 0 {
		t.Fatalf("Room after device 0 vanished: %+v", room)
	}
	if b, err := l.Grant(LeaseRequest{Owner: "b", VRAMMiB: 1000, Local: true}); err != nil || b.Device().UUID != "GPU-b" {
		t.Fatalf("Grant after vanish: %v", err)
	}
	if _, err := l.Grant(LeaseRequest{Owner: "c", VRAMMiB: 5500, Local: true}); !errors.Is(err, ErrInsufficientVRAM) {
		t.Fatalf("Grant that only the vanished device could hold = %v", err)
	}
	a.Release()
	if room := l.Room(); len(room) != 1 || room[0].Device.UUID != "GPU-b" {
		t.Fatalf("Room after the vanished device's last lease ended: %+v", room)
	}
	// The device comes back with its memory.
	inv.Set(gpuFree(0, 10000), gpuFree(1, 5000))
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	if room := l.Room(); len(room) != 2 || room[0].AvailableMiB != 10000 || room[1].LeasedMiB != 1000 || room[1].AvailableMiB != 4000 {
		t.Fatalf("Room after the device came back: %+v", room)
	}
}

func TestGrantRefreshesFirst(t *testing.T) {
	l := NewLedger(Static(4000), 0, nil) // nobody calls Refresh
	ls, err := l.Grant(LeaseRequest{Owner: "a", VRAMMiB: 4000})
	if err != nil {
		t.Fatalf("first Grant did not read the inventory: %v", err)
	}
	ls.Release()
}

func TestGrantErrors(t *testing.T) {
	noGPUInv := NewFake()
	noGPUInv.SetErr(noGPU("NVML library libnvidia-ml.so.1 not found"))
	l := NewLedger(noGPUInv, 0, nil)
	_, err := l.Grant(LeaseRequest{Owner: "deleg-7", VRAMMiB: 100})
	if !errors.Is(err, ErrInsufficientVRAM) || !strings.Contains(err.Error(), "no NVIDIA GPU") || !strings.Contains(err.Error(), "deleg-7") {
		t.Fatalf("Grant without GPU = %v", err)
	}

	l = newTestLedger(t, Static(8000), 1000, nil)
	if _, err := l.Grant(LeaseRequest{Owner: "z", VRAMMiB: 0}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Grant(0 MiB) = %v, want ErrInvalidRequest", err)
	}
	_, err = l.Grant(LeaseRequest{Owner: "deleg-8", VRAMMiB: 7001})
	for _, want := range []string{"remote request of 7001 MiB", "deleg-8", "at most 7000 MiB", "headroom 1000 MiB"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := l.Grant(LeaseRequest{Owner: "L", VRAMMiB: 3000, Local: true}); err != nil {
		t.Fatal(err)
	}
	_, err = l.Grant(LeaseRequest{Owner: "L2", VRAMMiB: 4500, Local: true})
	if err == nil || !strings.Contains(err.Error(), "at most 4000 MiB on one device even after preempting every remote lease") {
		t.Errorf("local refusal = %v", err)
	}
}
