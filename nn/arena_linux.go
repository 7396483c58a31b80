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

// adviseCold asks Linux to keep b's whole pages off huge pages and to
// drop what they hold (MADV_NOHUGEPAGE, MADV_DONTNEED): memory the Go
// heap reuses comes back zeroed, so written, and resident; dropped, its
// pages read as zeros again, and take memory only once written. b is
// zero, so its values do not change; errors leave it as it is.
func adviseCold(b []float32) {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((4096-addr%4096)%4096) / 4 // the first whole page
	n := (len(b) - lo) / pageFloats * pageFloats
	if n <= 0 {
		return
	}
	m := unsafe.Slice((*byte)(unsafe.Pointer(&b[lo])), 4*n)
	_ = unix.Madvise(m, unix.MADV_NOHUGEPAGE)
	_ = unix.Madvise(m, unix.MADV_DONTNEED)
}
