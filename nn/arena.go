package nn

import "unsafe"

// arena hands out a worker's float32 buffers, carved from one
// allocation whose 2 MiB-aligned pages are asked to be backed by
// transparent huge pages before they are first touched (adviseHuge; a
// no-op where the OS has none). A private step touches about 8 MiB of
// buffers per worker, more than the TLB covers in 4 KiB pages. The
// buffers are plain Go memory: nothing is freed by hand, and the
// allocation lives as long as any buffer carved from it. A worker's
// buffers that a private step never touches are carved from a second
// arena, on base pages (coldArena, buildWorker).
//
// An arena is built in two passes: a sizing one (buf nil: each buffer
// is a view of a scratch slice and only the offsets are kept), then one
// over an allocation of the size the first pass found, which carves the
// same buffers at the same offsets.
type arena struct {
	buf []float32 // nil while sizing
	// base is the offset in buf of the first 2 MiB boundary, where
	// carving starts; off the floats carved so far from base.
	base, off int
	big       int       // buffers of at least a page carved so far
	scratch   []float32 // sizing: the buffers' storage
	plain     bool      // every buffer its own make (Options.noArena)
}

const (
	lineFloats = 64 / 4      // a cache line
	pageFloats = 4096 / 4    // a base page
	hugeFloats = 2 << 20 / 4 // a huge page
)

// minHugeFloats is the smallest arena that asks for huge pages: a huge
// page is resident whole, so a small model's few buffers (on each of
// many workers) would take 2 MiB where they need much less, with few
// pages for the TLB to miss anyway.
const minHugeFloats = 2 * hugeFloats

// newArena returns an arena for the buffers a sizing pass counted
// (floats), asking for huge pages unless noHuge (or the arena is
// smaller than minHugeFloats: then it is one allocation of that size):
// for the whole huge pages the buffers fill, and for the last, partial
// one only if lastPage. A huge page is resident whole, while base pages
// only once written: the last buffers carved, which a step may touch in
// part (the accumulator, buildWorker), keep base pages.
//
// An arena without huge pages is advised off them (adviseCold): the Go
// heap reuses the address ranges of arenas the collector freed, and
// those keep their advice, so a plain allocation may get huge pages it
// did not ask for.
func newArena(floats int, noHuge, lastPage bool) *arena {
	if floats < minHugeFloats {
		return coldArena(floats)
	}
	n := roundUpTo(floats, hugeFloats)
	buf := make([]float32, n+hugeFloats)
	a := &arena{buf: buf}
	if addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf))); addr%(4*hugeFloats) != 0 {
		a.base = int(4*hugeFloats-addr%(4*hugeFloats)) / 4
	}
	if noHuge {
		adviseCold(buf)
		return a
	}
	if !lastPage {
		// The rest on base pages, taking memory only once written
		// (adviseCold: reused memory comes back written).
		n = floats / hugeFloats * hugeFloats
		adviseCold(buf[a.base+n : a.base+floats])
	}
	adviseHuge(buf[a.base : a.base+n])
	return a
}

// coldArena returns an arena of floats on base pages, dropped
// (adviseCold): for the buffers a private step does not touch, which
// take no memory until something writes them (buildWorker).
func coldArena(floats int) *arena {
	a := &arena{buf: make([]float32, floats)}
	adviseCold(a.buf)
	return a
}

// f32 returns a new zeroed buffer of n floats: aligned to a cache line,
// and for n of a page or more, starting at a different line of the page
// (a colour) than the few large buffers carved before it, so that
// buffers a product reads together do not all map to the same cache
// sets.
func (a *arena) f32(n int) []float32 {
	if a.plain {
		return make([]float32, n)
	}
	o := roundUpTo(a.off, lineFloats)
	if n >= pageFloats {
		c := (a.big * 5 % (pageFloats / lineFloats)) * lineFloats
		o = roundUpTo(o-c, pageFloats) + c
		a.big++
	}
	a.off = o + n
	if a.buf == nil {
		if cap(a.scratch) < n {
			a.scratch = make([]float32, n)
		}
		return a.scratch[:n:n]
	}
	return a.buf[a.base+o : a.base+o+n : a.base+o+n]
}

// holds reports whether the buffer f lies in a's allocation (false for
// a nil arena or one of Options.noArena).
func (a *arena) holds(f []float32) bool {
	if a == nil || len(a.buf) == 0 || len(f) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(a.buf)))
	s := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
	return s >= lo && s+4*uintptr(len(f)) <= lo+4*uintptr(len(a.buf))
}

// like returns buffers of the lengths of bufs (nil for the empty ones),
// as likeAll, from a.
func (a *arena) like(bufs [][]float32) [][]float32 {
	out := make([][]float32, len(bufs))
	for k, b := range bufs {
		if len(b) > 0 {
			out[k] = a.f32(len(b))
		}
	}
	return out
}

// roundUpTo rounds n >= 0 up to a multiple of m.
func roundUpTo(n, m int) int { return (n + m - 1) / m * m }
