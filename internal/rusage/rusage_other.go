//go:build !unix

package rusage

// CPUSeconds is unavailable here: 0.
func CPUSeconds() float64 { return 0 }

// MaxRSSMiB is unavailable here: 0.
func MaxRSSMiB() float64 { return 0 }
