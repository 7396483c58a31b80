//go:build unix

package mfnoise

import "syscall"

// cpuSeconds is the process's user+system CPU time: on a shared machine it
// says more about cost than wall time does.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
