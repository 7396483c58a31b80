//go:build !linux

package rusage

import "time"

// ThreadCPU is false: no per-thread CPU clock here.
func ThreadCPU() (time.Duration, bool) { return 0, false }
