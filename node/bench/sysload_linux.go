//go:build linux

package bench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// userHZ is the unit of /proc/stat's counters; Linux fixes it at 100 for
// user space on every architecture Go supports.
const userHZ = 100

// systemCPU reads how much CPU time the whole machine has spent busy, in
// seconds, from the aggregate line of /proc/stat, so that a phase can say
// how much of the machine other processes took while it ran.
func systemCPU() (busy float64, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, false
	}
	fields := bytes.Fields(sc.Bytes())
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return 0, false
	}
	// user nice system idle iowait irq softirq steal guest guest_nice: all
	// but idle and iowait are busy, and guest time is already in user.
	var total uint64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, false
		}
		total += v
	}
	return float64(total) / userHZ, true
}
