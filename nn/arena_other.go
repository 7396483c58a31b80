//go:build !linux

package nn

// adviseHuge does nothing where transparent huge pages cannot be asked
// for (arena_linux.go).
func adviseHuge([]float32) {}
