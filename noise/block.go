package noise

import (
	"slices"

	mrand "math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// blockSource streams a dense G (optimal decoders of trees and FFT, or C^-1
// of a dense encoder) when holding all live noise rows does not fit the
// memory budget. It computes W for a block of T steps at a time: for every
// coordinate shard it draws, in lock step, the shard of every noise row the
// block uses (one ChaCha8 stream per row, so the draws are exactly those of
// the other methods) a sub-chunk at a time, and multiplies by G[block, :]
// with a matrix product. Each noise row is thus drawn once per block
// instead of once per step (T times fewer draws than regenerating), with
// memory T d for the block instead of m d for all of Z.
type blockSource[T floatT] struct {
	*common
	lc      *liveCols
	t       int     // block length
	keys    []key   // zeroed after the last step that uses the row
	eraseAt [][]int // eraseAt[s]: rows whose keys go after step s
	block   [][]T   // W rows [start, start+t)
	start   int     // first step held in block; -1 if none
	gens    [][]*mrand.ChaCha8
	zsub    [][]float64 // per worker: K x blockSub draws
	osub    [][]float64 // per worker: t x blockSub products
	kmax    int         // most noise rows any block uses
}

// blockSub is the number of coordinates drawn per row before a product.
const blockSub = 256

// blockFixed is the memory a block source needs besides its t rows of d.
func blockFixed(workers, kmax, t, m int) int64 {
	return int64(workers)*(int64(kmax)*(blockSub*8+320)+int64(t)*blockSub*8) + int64(m)*32
}

// blockCols returns the noise rows that steps [t0, t1) use, sorted.
func (lc *liveCols) blockCols(t0, t1 int) []int {
	var js []int
	for i := t0; i < t1; i++ {
		for _, tm := range lc.rows[i] {
			js = append(js, tm.j)
		}
	}
	slices.Sort(js)
	return slices.Compact(js)
}

// dense reports whether more than half of G is nonzero, so that liveness
// cannot help much and the block method should be preferred.
func (lc *liveCols) dense() bool {
	return int64(lc.nnz)*2 > int64(lc.n)*int64(lc.m)
}

// defaultBlock is the block length with no memory budget: long enough that
// drawing m/64 noise rows per step costs less than the product, short
// enough to hold (64 rows of d: 256 MB for d = 1e6 in float32).
const defaultBlock = 64

// planBlock returns the largest power-of-two block length (at most
// defaultBlock with no budget, 256 with one) that fits the budget, or 0 if
// none of length >= 2 does.
func planBlock(lc *liveCols, c *common, budget int64) int {
	if budget == 0 {
		return min(lc.n, defaultBlock)
	}
	best := 0
	for t := 2; t <= min(lc.n, 256); t *= 2 {
		kmax := lc.m // an upper bound; the exact value depends on t
		if blockFixed(c.workers, kmax, t, lc.m)+int64(t)*int64(c.d)*int64(c.elem) <= budget {
			best = t
		}
	}
	return best
}

func newBlock[T floatT](lc *liveCols, c *common, t int, seed key, square bool) *blockSource[T] {
	c.kind = KindTallBlocked
	if square {
		c.kind = KindDenseBlocked
	}
	c.plan = fingerprint(c.kind, t)
	s := &blockSource[T]{common: c, lc: lc, t: t, start: -1}
	s.keys, _ = rowKeys(seed, lc.m)
	s.eraseAt = make([][]int, lc.n)
	for j := range lc.m {
		if lc.first[j] < 0 {
			s.keys[j] = key{}
			continue
		}
		s.eraseAt[lc.last[j]] = append(s.eraseAt[lc.last[j]], j)
	}
	for t0 := 0; t0 < lc.n; t0 += t {
		s.kmax = max(s.kmax, len(lc.blockCols(t0, min(lc.n, t0+t))))
	}
	s.block = make([][]T, t)
	for r := range s.block {
		s.block[r] = make([]T, c.d)
	}
	s.gens = make([][]*mrand.ChaCha8, c.workers)
	s.zsub = make([][]float64, c.workers)
	s.osub = make([][]float64, c.workers)
	for w := range c.workers {
		s.gens[w] = make([]*mrand.ChaCha8, s.kmax)
		for k := range s.gens[w] {
			s.gens[w][k] = mrand.NewChaCha8(key{})
		}
		s.zsub[w] = make([]float64, s.kmax*blockSub)
		s.osub[w] = make([]float64, t*blockSub)
	}
	return s
}

func (s *blockSource[T]) base() *common { return s.common }

func (s *blockSource[T]) memoryBytes() int64 {
	return blockFixed(s.workers, s.kmax, s.t, s.m) + int64(s.t)*int64(s.d)*int64(s.elem)
}

// compute fills the block with W rows [t0, t0+t).
func (s *blockSource[T]) compute(t0 int) {
	t1 := min(s.n, t0+s.t)
	rows := t1 - t0
	js := s.lc.blockCols(t0, t1)
	k := len(js)
	col := make(map[int]int, k)
	for q, j := range js {
		col[j] = q
	}
	gb := make([]float64, rows*k) // G[t0:t1, js], row-major
	for r := range rows {
		for _, tm := range s.lc.rows[t0+r] {
			gb[r*k+col[tm.j]] = tm.g
		}
	}
	if k == 0 {
		for r := range rows {
			clear(s.block[r])
		}
		s.start = t0
		return
	}
	impl := blas64.Implementation()
	s.forShards(func(w, sh int) {
		lo, hi := shardRange(sh, s.d)
		gens := s.gens[w][:k]
		for q, j := range js {
			gens[q].Seed(shardSeed(s.keys[j], sh))
		}
		z, o := s.zsub[w], s.osub[w]
		for c0 := lo; c0 < hi; c0 += blockSub {
			width := min(blockSub, hi-c0)
			for q := range k {
				fillNormal(gens[q], z[q*blockSub:q*blockSub+width])
			}
			impl.Dgemm(blas.NoTrans, blas.NoTrans, rows, width, k, 1, gb, k, z, blockSub, 0, o, blockSub)
			for r := range rows {
				dst := s.block[r][c0 : c0+width]
				src := o[r*blockSub : r*blockSub+width]
				for x := range dst {
					dst[x] = T(src[x])
				}
			}
		}
	})
	s.start = t0
}

func (s *blockSource[T]) next(dst []T) error {
	if err := s.checkNext(len(dst)); err != nil {
		return err
	}
	// Blocks are aligned to multiples of t, so a restored source recomputes
	// exactly the products an uninterrupted one made (same rows, same
	// columns, same order): the noise continues bit for bit. Rows before
	// the restored step may use erased keys; their coefficients in the
	// rows still to come are exact zeros.
	if t0 := s.step - s.step%s.t; s.start != t0 {
		s.compute(t0)
	}
	copy(dst, s.block[s.step-s.start])
	for _, j := range s.eraseAt[s.step] {
		s.keys[j] = key{}
	}
	s.step++
	return nil
}

func (s *blockSource[T]) appendState(b []byte) []byte {
	for _, k := range s.keys {
		b = append(b, k[:]...)
	}
	return b
}

func (s *blockSource[T]) stateSize(int) int { return 32 * len(s.keys) }

// restoreState keeps only the keys: the block is recomputed from the
// restored step on (the checkpoint holds no W rows).
func (s *blockSource[T]) restoreState(r *reader) error {
	for j := range s.keys {
		s.keys[j] = r.key()
	}
	s.start = -1
	return r.err
}
