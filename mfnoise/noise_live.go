package mfnoise

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// liveSource streams W_i = sum_j G[i,j] z_j for a general n x m matrix G
// (A^-1 B for tall encoders, C^-1 when back substitution does not fit).
// Noise row z_j is first needed on step first[j] and last on step last[j].
// A stored row is drawn once at first[j], held in a buffer until last[j] and
// then released; an unstored row is regenerated from its key at every use.
// Which rows are stored is a memory plan: all multi-use rows whose lifetime
// last-first is at most a threshold chosen to fit the memory budget, so the
// short-lived rows (most reuse per byte held) are stored first.
type liveSource[T floatT] struct {
	*common
	rows        [][]term // nonzero G[i,:]
	first, last []int    // per noise row; -1 if never used
	store       []bool
	keys        []key       // per noise row; zeroed once no longer needed
	slot        []int       // noise row -> pool index while held, else -1
	pool        [][]T       // buffers of d elements
	free        []int       // unused pool indices
	scratch     [][]T       // per worker: one shard of an unstored row
	acc         [][]float64 // per worker: one shard of float64 accumulators
	peak        int         // planned maximum number of held rows
}

type term struct {
	j int
	g float64
}

func newLive[T floatT](g *mat.Dense, square bool, d int, opt NoiseOptions) (*liveSource[T], error) {
	n, m := g.Dims()
	gmax := maxAbs(g)
	if gmax == 0 || math.IsNaN(gmax) || math.IsInf(gmax, 0) {
		return nil, invalidf("noise: A^-1 B has max entry %v", gmax)
	}
	tol := StructuralZeroTol * gmax
	rows := make([][]term, n)
	first := make([]int, m)
	last := make([]int, m)
	for j := range first {
		first[j], last[j] = -1, -1
	}
	parts := []any{"live", n, m}
	for i := range n {
		for j := range m {
			v := g.At(i, j)
			if math.Abs(v) <= tol {
				continue
			}
			rows[i] = append(rows[i], term{j, v})
			parts = append(parts, i, j, v)
			if first[j] < 0 {
				first[j] = i
			}
			last[j] = i
		}
	}
	// Lifetimes of the rows used more than once.
	var lens []int
	for j := range m {
		if last[j] > first[j] {
			lens = append(lens, last[j]-first[j])
		}
	}
	slices.Sort(lens)
	lens = slices.Compact(lens)

	// The kind is decided below; build with a placeholder to learn the
	// worker count and element size for the memory plan.
	c, err := newCommon[T](KindSparseLive, n, m, d, opt)
	if err != nil {
		return nil, err
	}
	shard := min(d, shardLen)
	fixed := int64(c.workers)*int64(shard)*int64(c.elem+8) + int64(m)*32
	perRow := int64(d) * int64(c.elem)
	threshold := -1 // store rows with lifetime <= threshold
	peak := 0
	if len(lens) > 0 {
		if opt.MemoryBudget == 0 {
			threshold = lens[len(lens)-1]
			peak = peakHeld(first, last, threshold, n)
		} else {
			// peakHeld grows with the threshold: binary search the largest
			// one that fits.
			lo, hi := 0, len(lens) // lens[:lo] fit, lens[hi:] do not
			for lo < hi {
				mid := (lo + hi) / 2
				if fixed+int64(peakHeld(first, last, lens[mid], n))*perRow <= opt.MemoryBudget {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			if lo > 0 {
				threshold = lens[lo-1]
				peak = peakHeld(first, last, threshold, n)
			}
		}
	}
	if opt.MemoryBudget > 0 && fixed > opt.MemoryBudget {
		return nil, invalidf("noise: memory budget %d bytes is below the minimum %d for d = %d with %d workers", opt.MemoryBudget, fixed, d, c.workers)
	}
	store := make([]bool, m)
	multi, stored, allFirst := 0, 0, true
	for j := range m {
		if first[j] > 0 {
			allFirst = false
		}
		if last[j] > first[j] {
			multi++
			if last[j]-first[j] <= threshold {
				store[j] = true
				stored++
			}
		}
	}
	switch {
	case stored < multi && stored == 0 && square:
		c.kind = KindDenseRegenerate
	case stored < multi && stored == 0:
		c.kind = KindTallRegenerate
	case stored < multi:
		c.kind = KindLiveRegenerate
	case allFirst && n > 1 && multi > 0:
		c.kind = KindTallPregenerated
	default:
		c.kind = KindSparseLive
	}
	seed, err := newSeed(opt.Seed)
	if err != nil {
		return nil, err
	}
	c.mech = fingerprint(parts...)
	c.plan = fingerprint(c.kind, threshold)
	s := &liveSource[T]{common: c, rows: rows, first: first, last: last, store: store, peak: peak}
	s.keys, _ = rowKeys(seed, m)
	s.slot = make([]int, m)
	for j := range s.slot {
		s.slot[j] = -1
	}
	s.scratch = make([][]T, c.workers)
	s.acc = make([][]float64, c.workers)
	for w := range c.workers {
		s.scratch[w] = make([]T, shard)
		s.acc[w] = make([]float64, shard)
	}
	s.eraseUnused()
	return s, nil
}

// peakHeld is the largest number of rows with lifetime <= threshold alive
// on one step (a row is held on steps first..last).
func peakHeld(first, last []int, threshold, n int) int {
	delta := make([]int, n+1)
	for j := range first {
		if last[j] > first[j] && last[j]-first[j] <= threshold {
			delta[first[j]]++
			delta[last[j]+1]--
		}
	}
	cur, peak := 0, 0
	for _, v := range delta[:n] {
		cur += v
		peak = max(peak, cur)
	}
	return peak
}

// eraseUnused zeroes the keys of rows that are not needed from the current
// step on: never used, already generated into a held buffer, or past their
// last use.
func (s *liveSource[T]) eraseUnused() {
	for j := range s.keys {
		if s.first[j] < 0 || s.last[j] < s.step || (s.store[j] && s.first[j] < s.step) {
			s.keys[j] = key{}
		}
	}
}

func (s *liveSource[T]) base() *common { return s.common }

func (s *liveSource[T]) memoryBytes() int64 {
	return int64(len(s.pool))*int64(s.d)*int64(s.elem) +
		int64(s.workers)*int64(len(s.acc[0]))*int64(s.elem+8) + int64(len(s.keys))*32
}

func (s *liveSource[T]) hold(j int) {
	if len(s.free) > 0 {
		s.slot[j] = s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		return
	}
	s.slot[j] = len(s.pool)
	s.pool = append(s.pool, make([]T, s.d))
}

func (s *liveSource[T]) release(j int) {
	s.free = append(s.free, s.slot[j])
	s.slot[j] = -1
}

func (s *liveSource[T]) next(dst []T) error {
	if err := s.checkNext(len(dst)); err != nil {
		return err
	}
	i := s.step
	row := s.rows[i]
	for _, t := range row {
		if s.store[t.j] && s.first[t.j] == i {
			s.hold(t.j)
		}
	}
	s.forShards(func(w, sh int) {
		lo, hi := shardRange(sh, s.d)
		acc := s.acc[w][:hi-lo]
		clear(acc)
		for _, t := range row {
			var src []T
			if s.store[t.j] {
				src = s.pool[s.slot[t.j]][lo:hi]
				if s.first[t.j] == i {
					genShard(s.gens[w], s.keys[t.j], sh, src)
				}
			} else {
				src = s.scratch[w][:hi-lo]
				genShard(s.gens[w], s.keys[t.j], sh, src)
			}
			accumulate(t.g, src, acc)
		}
		out := dst[lo:hi]
		for k := range out {
			out[k] = T(acc[k])
		}
	})
	for _, t := range row {
		if s.last[t.j] == i && s.store[t.j] {
			s.release(t.j)
		}
	}
	s.step++
	for _, t := range row {
		if s.last[t.j] == i || s.store[t.j] {
			s.keys[t.j] = key{}
		}
	}
	return nil
}

// accumulate is acc += g x in float64.
func accumulate[T floatT](g float64, x []T, acc []float64) {
	x = x[:len(acc)]
	for k := range acc {
		acc[k] += g * float64(x[k])
	}
}

// heldAt lists the rows whose buffers are live between steps: generated
// before step and needed at or after it.
func (s *liveSource[T]) heldAt(step int) []int {
	var js []int
	for j := range s.store {
		if s.store[j] && s.first[j] < step && s.last[j] >= step {
			js = append(js, j)
		}
	}
	return js
}

func (s *liveSource[T]) appendState(b []byte) []byte {
	for _, k := range s.keys {
		b = append(b, k[:]...)
	}
	for _, j := range s.heldAt(s.step) {
		b = appendFloats(b, s.pool[s.slot[j]])
	}
	return b
}

func (s *liveSource[T]) stateSize(step int) int {
	return 32*len(s.keys) + len(s.heldAt(step))*s.d*s.elem
}

func (s *liveSource[T]) restoreState(r *reader) error {
	for j := range s.keys {
		s.keys[j] = r.key()
	}
	for j := range s.slot {
		if s.slot[j] >= 0 {
			s.release(j)
		}
	}
	for _, j := range s.heldAt(s.step) {
		s.hold(j)
		readFloats(r, s.pool[s.slot[j]])
	}
	return r.err
}
