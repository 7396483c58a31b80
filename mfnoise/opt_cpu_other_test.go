//go:build !unix

package mfnoise

func cpuSeconds() float64 { return 0 }
