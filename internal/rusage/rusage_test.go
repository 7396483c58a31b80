//go:build unix

package rusage

import (
	"runtime"
	"testing"
)

// TestRusageCounts: CPU time grows with work done and the peak resident
// memory covers a slice the test has touched.
func TestRusageCounts(t *testing.T) {
	before := CPUSeconds()
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i&7) * 1e-9
	}
	if after := CPUSeconds(); after <= before {
		t.Errorf("CPU time did not grow: %g then %g (x = %g)", before, after, x)
	}
	if rss := MaxRSSMiB(); rss < 64 {
		t.Errorf("peak RSS %.1f MiB, below the 64 MiB touched", rss)
	}
	_ = buf[len(buf)-1]
}

// TestThreadCPUCounts: where the thread clock exists, it grows with work
// done on the (locked) thread.
func TestThreadCPUCounts(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0, ok := ThreadCPU()
	if !ok {
		t.Skip("no per-thread CPU clock on this system: nothing to check")
	}
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i&7) * 1e-9
	}
	if c1, _ := ThreadCPU(); c1 <= c0 {
		t.Errorf("thread CPU time did not grow: %v then %v (x = %g)", c0, c1, x)
	}
}
