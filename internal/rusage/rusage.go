// Package rusage reads this process's resource use (CPU time and peak
// resident memory) for benchmarks, which report work done as well as wall
// time because the machines they run on are often shared.
package rusage
