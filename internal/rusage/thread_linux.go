package rusage

import (
	"time"

	"golang.org/x/sys/unix"
)

// ThreadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
// or false when the system does not give it. Pin the goroutine
// (runtime.LockOSThread) for the difference of two readings to mean
// anything.
func ThreadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
