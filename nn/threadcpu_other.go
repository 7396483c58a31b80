//go:build !linux

package nn

import "time"

// threadCPU is false: no per-thread CPU clock here (wall time is used).
func threadCPU() (time.Duration, bool) { return 0, false }
