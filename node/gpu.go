package node

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// openGPU returns the node's inventory and lease ledger: the declared VRAM
// when the config sets it, else NVML. Without an NVIDIA GPU it returns no
// ledger and the reason, never an error: such a node simply offers no VRAM.
func openGPU(cfg config.GPU) (gpu.Inventory, *gpu.Ledger, func(), string) {
	var inv gpu.Inventory
	closeFn := func() {}
	if cfg.DeclaredVRAMMiB > 0 {
		inv = gpu.Static(cfg.DeclaredVRAMMiB)
	} else {
		nv, err := gpu.OpenNVML()
		if err != nil {
			return nil, nil, closeFn, err.Error()
		}
		inv, closeFn = nv, func() { _ = nv.Close() }
	}
	l := gpu.NewLedger(inv, cfg.HeadroomMiB, nil)
	if err := l.Refresh(); err != nil {
		closeFn()
		return nil, nil, func() {}, err.Error()
	}
	return inv, l, closeFn, ""
}

// GPUReport describes a stopped node's GPU the way the daemon would see it
// (for kith gpu without a daemon).
func GPUReport(cfg config.Config) api.GPU {
	inv, l, closeFn, reason := openGPU(cfg.GPU)
	defer closeFn()
	return gpuReport(inv, l, reason, cfg.GPU)
}

func gpuReport(inv gpu.Inventory, l *gpu.Ledger, reason string, cfg config.GPU) api.GPU {
	out := api.GPU{HeadroomMiB: cfg.HeadroomMiB, Declared: cfg.DeclaredVRAMMiB > 0, Leases: []api.GPULease{}}
	if inv == nil {
		out.NoGPU = reason
		return out
	}
	out.Inventory = strings.TrimRight(gpu.Describe(inv), "\n")
	if l != nil {
		for _, li := range l.Leases() {
			out.Leases = append(out.Leases, api.GPULease{ID: fmt.Sprint(li.ID), Owner: li.Owner, VRAMMiB: li.VRAMMiB,
				Local: li.Local, Device: li.Device, GrantedAt: li.GrantedAt})
		}
	}
	return out
}

func (n *Node) handleGPU(w http.ResponseWriter, _ *http.Request) {
	n.mu.Lock()
	inv, l, reason := n.gpuInv, n.ledger, n.gpuReason
	n.mu.Unlock()
	if l != nil {
		if err := l.Refresh(); err != nil && !errors.Is(err, gpu.ErrNoGPU) {
			n.log.Warn("gpu refresh", "err", err)
		}
	}
	writeJSON(w, http.StatusOK, gpuReport(inv, l, reason, n.cfg.GPU))
}
