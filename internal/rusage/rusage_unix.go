//go:build unix

package rusage

import "syscall"

// CPUSeconds is the process's user and system CPU time in seconds, 0 if it
// cannot be read.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// MaxRSSMiB is the process's peak resident memory in MiB (Linux reports
// KiB), 0 if it cannot be read.
func MaxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024
}
