//go:build !unix

package mfnoise

// processCPUSeconds is unavailable here; benchmarks then report 0 CPU time.
func processCPUSeconds() float64 { return 0 }
