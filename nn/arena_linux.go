//go:build linux

package nn

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// adviseHuge asks Linux to back b (2 MiB-aligned, a multiple of 2 MiB)
// with transparent huge pages: MADV_HUGEPAGE makes its first-touch
// faults take huge pages where the machine's setting is "madvise" (or
// "always"), and MADV_COLLAPSE turns into huge pages what the Go heap
// had already touched there (reused memory). Both are hints: an error
// (an older kernel, THP "never", no free huge page) leaves base pages,
// with the same values.
func adviseHuge(b []float32) {
	if len(b) == 0 {
		return
	}
	m := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), 4*len(b))
	if unix.Madvise(m, unix.MADV_HUGEPAGE) == nil {
		_ = unix.Madvise(m, unix.MADV_COLLAPSE)
	}
}
