//go:build !linux

package nn

// adviseHuge does nothing where transparent huge pages cannot be asked
// for (arena_linux.go).
func adviseHuge([]float32) {}

// adviseCold does nothing where pages cannot be dropped so (arena_linux.go).
func adviseCold([]float32) {}
