//go:build !unix

package bench

import "time"

// cpuTime is unknown off Unix.
func cpuTime() (time.Duration, bool) { return 0, false }
