package noise

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// liveSource streams W_i = sum_j G[i,j] z_j for a general n x m matrix G
// (A^-1 B for tall encoders, C^-1 when back substitution does not fit the
// memory budget).
//
// Noise row z_j is first needed on step first[j] and last on step last[j].
// A stored row is drawn once, at first[j], into a buffer ("slot"); an
// unstored row is regenerated from its key at every use. Stored rows whose
// remaining (future) columns of G are proportional are merged into one slot
// holding their weighted sum: after step t only G[t+1:, j] matters, and if
// G[t+1:, j] = c G[t+1:, r] then G[i,j] z_j + G[i,r] z_r = G[i,r] (z_r +
// c z_j) for every later i. A slot is released after the last step that
// uses it. For a binary tree with an online decoder this keeps one slot per
// distinct future (O(log n) or O(log^2 n) slots instead of the O(n) rows
// alive at once); with no proportional columns it is plain liveness.
//
// The whole schedule (which slot each draw goes to, merges, releases) is
// compiled at construction, so a step is a fixed list of vector operations
// run shard by shard on the workers.
type liveSource[T floatT] struct {
	*common
	prog    []stepProg
	keys    []key       // per noise row; zeroed once no longer needed
	eraseAt [][]int     // eraseAt[t]: rows whose keys go after step t
	pool    [][]T       // slots of d elements, allocated on first use
	nslots  int         // planned number of slots (the peak)
	scratch [][]T       // per worker: one shard of an unstored row
	acc     [][]float64 // per worker: one shard of accumulators
	merged  bool        // proportional futures merged
	nnz     int
}

// stepProg is what step t does: W_t = sum out + sum gen, then the merges,
// then the releases.
type stepProg struct {
	out    []slotTerm // W_t += c * slot
	gen    []genTerm  // draws, founders first
	merges []mergeOp  // after the output: dst += c * src
	alloc  []int      // slots first written on this step
	free   []int      // slots released after this step
}

type slotTerm struct {
	slot int
	c    float64
}

type genTerm struct {
	j    int     // noise row
	g    float64 // coefficient in W_t
	slot int     // >= 0: draw into this new slot and keep it
	into int     // >= 0: then add c * z_j into this slot
	c    float64
}

type mergeOp struct {
	dst, src int
	c        float64
}

// liveCols is G as sparse rows and columns after dropping structural zeros.
type liveCols struct {
	n, m        int
	rows        [][]term
	colRow      [][]int
	colVal      [][]float64
	first, last []int
	nnz         int
}

type term struct {
	j int
	g float64
}

func newLiveCols(g *mat.Dense) (*liveCols, [32]byte, error) {
	n, m := g.Dims()
	gmax := maxAbs(g)
	if gmax == 0 || math.IsNaN(gmax) || math.IsInf(gmax, 0) {
		return nil, [32]byte{}, invalidf("A^-1 B has max entry %v", gmax)
	}
	tol := mfnoise.StructuralZeroCutoff(g)
	lc := &liveCols{n: n, m: m, rows: make([][]term, n), colRow: make([][]int, m), colVal: make([][]float64, m),
		first: make([]int, m), last: make([]int, m)}
	for j := range m {
		lc.first[j], lc.last[j] = -1, -1
	}
	var fp hasher
	fp.init()
	fp.str("live")
	fp.int(n)
	fp.int(m)
	for i := range n {
		for j := range m {
			v := g.At(i, j)
			if math.Abs(v) <= tol {
				continue
			}
			lc.rows[i] = append(lc.rows[i], term{j, v})
			lc.colRow[j] = append(lc.colRow[j], i)
			lc.colVal[j] = append(lc.colVal[j], v)
			fp.int(i)
			fp.int(j)
			fp.float(v)
			if lc.first[j] < 0 {
				lc.first[j] = i
			}
			lc.last[j] = i
			lc.nnz++
		}
	}
	return lc, fp.sum(), nil
}

// mergeTol is the tolerance for two future columns of G to count as
// proportional, relative to the larger column's largest entry. A merge
// replaces G[i,j] by c G[i,r], an error of at most mergeTol max_i |G[i,j]|
// per merged row, the same kind of bound as for dropped structural zeros
// and far below float32 resolution. Columns that are proportional in exact
// arithmetic but computed through A^-1 B with residue above it are simply
// not merged (correct, with more memory).
const mergeTol = 1e-12

// mergeWorthwhile bounds the compile work of merging (proportionality is
// checked on every future column at every step): on for sparse G, off for
// dense G, whose columns are not proportional anyway.
func (lc *liveCols) mergeWorthwhile() bool {
	logn := 1
	for 1<<logn <= lc.n {
		logn++
	}
	return int64(lc.nnz) <= 32*int64(lc.n+lc.m)*int64(logn)
}

// compile builds the step programs. store[j] says whether noise row j is
// held in a slot; merge enables merging of proportional futures.
func (lc *liveCols) compile(store []bool, merge bool) (prog []stepProg, eraseAt [][]int, nslots int) {
	c := compiler{lc: lc, store: store, merge: merge,
		prog:   make([]stepProg, lc.n),
		ptr:    make([]int, lc.m),
		rep:    map[int]int{},
		inSlot: make([]bool, lc.m)}
	eraseAt = lc.eraseSchedule(store)
	for t := range lc.n {
		p := &c.prog[t]
		c.outputs(p, t)
		newStored := c.draws(p, t)
		// Boundary t -> t+1: group the live slots and the new stored rows
		// by proportional futures.
		items, dead := c.futures(t, newStored)
		c.group(p, items, dead)
	}
	return c.prog, eraseAt, c.nslots
}

// compiler is the state of compile from one step to the next.
type compiler struct {
	lc         *liveCols
	store      []bool
	merge      bool
	prog       []stepProg
	nslots     int
	ptr        []int       // colRow[j][ptr[j]] is the first use at or after the current step
	rep        map[int]int // live slot -> representative noise row
	inSlot     []bool      // drawn into (or merged into) a live slot
	free       []int
	slotsInUse []int
	// Scratch of one boundary, reused from step to step.
	items    []liveItem
	founders []liveFounder
	joins    []genTerm
}

// liveItem is a live slot or a new stored row with its future (the rows
// after the boundary of its column of G).
type liveItem struct {
	slot int // existing slot, or -1 for a new row
	tm   term
	rows []int
	vals []float64
}

// liveFounder is the first item of a group of proportional futures and the
// slot the group shares.
type liveFounder struct {
	it   liveItem
	slot int
}

// eraseSchedule lists, for each step, the noise rows whose key can be
// erased after it: a stored row's on its first use, the others' on their
// last.
func (lc *liveCols) eraseSchedule(store []bool) [][]int {
	eraseAt := make([][]int, lc.n)
	for j := range lc.m {
		switch {
		case lc.first[j] < 0:
		case store[j]:
			eraseAt[lc.first[j]] = append(eraseAt[lc.first[j]], j)
		default:
			eraseAt[lc.last[j]] = append(eraseAt[lc.last[j]], j)
		}
	}
	return eraseAt
}

// coef is G[t, j], advancing ptr[j] past t.
func (c *compiler) coef(j, t int) float64 {
	lc := c.lc
	for c.ptr[j] < len(lc.colRow[j]) && lc.colRow[j][c.ptr[j]] < t {
		c.ptr[j]++
	}
	if c.ptr[j] < len(lc.colRow[j]) && lc.colRow[j][c.ptr[j]] == t {
		return lc.colVal[j][c.ptr[j]]
	}
	return 0
}

// future is the rows > t of column j.
func (c *compiler) future(j, t int) ([]int, []float64) {
	c.coef(j, t+1)
	return c.lc.colRow[j][c.ptr[j]:], c.lc.colVal[j][c.ptr[j]:]
}

// outputs adds step t's output terms of the live slots.
func (c *compiler) outputs(p *stepProg, t int) {
	slices.Sort(c.slotsInUse)
	for _, s := range c.slotsInUse {
		if v := c.coef(c.rep[s], t); v != 0 {
			p.out = append(p.out, slotTerm{s, v})
		}
	}
}

// draws adds step t's draws that are not kept and returns the rows first
// used at t that are to be stored.
func (c *compiler) draws(p *stepProg, t int) (newStored []term) {
	for _, tm := range c.lc.rows[t] {
		switch {
		case c.inSlot[tm.j]:
			// Covered by its slot's output term.
		case c.lc.first[tm.j] == t && c.store[tm.j]:
			newStored = append(newStored, tm)
		default:
			p.gen = append(p.gen, genTerm{j: tm.j, g: tm.g, slot: -1, into: -1})
		}
	}
	return newStored
}

// futures lists the items to group at the boundary t -> t+1, existing
// slots first so they found the groups and new rows need no slot of their
// own; slots with no future are dead.
func (c *compiler) futures(t int, newStored []term) (items []liveItem, dead []int) {
	items = c.items[:0]
	for _, s := range c.slotsInUse {
		r, v := c.future(c.rep[s], t)
		if len(r) == 0 {
			dead = append(dead, s)
			continue
		}
		items = append(items, liveItem{slot: s, rows: r, vals: v})
	}
	for _, tm := range newStored {
		r, v := c.future(tm.j, t)
		items = append(items, liveItem{slot: -1, tm: tm, rows: r, vals: v})
	}
	c.items = items
	return items, dead
}

// group groups the items by proportional futures: a founder keeps (or
// draws into) its slot, a slot joining a group is merged into the
// founder's, a new row joining one is added to it. The slots released
// become reusable from the next step on, so a slot is never overwritten on
// the step that still reads it.
func (c *compiler) group(p *stepProg, items []liveItem, dead []int) {
	founders := c.founders[:0]
	var buckets map[string][]int // signature -> founder indices
	if c.merge {
		buckets = map[string][]int{}
	}
	joins := c.joins[:0]
	for _, it := range items {
		fi := -1
		var sig string
		if c.merge {
			sig = signature(it.rows, it.vals)
			for _, k := range buckets[sig] {
				if proportional(founders[k].it.rows, founders[k].it.vals, it.rows, it.vals) {
					fi = k
					break
				}
			}
		}
		if fi < 0 {
			founders = append(founders, c.found(p, it))
			if c.merge {
				buckets[sig] = append(buckets[sig], len(founders)-1)
			}
			continue
		}
		f := founders[fi]
		v := it.vals[0] / f.it.vals[0]
		if it.slot >= 0 {
			p.merges = append(p.merges, mergeOp{dst: f.slot, src: it.slot, c: v})
			dead = append(dead, it.slot)
		} else {
			joins = append(joins, genTerm{j: it.tm.j, g: it.tm.g, slot: -1, into: f.slot, c: v})
			c.inSlot[it.tm.j] = true
		}
	}
	p.gen = append(p.gen, joins...)
	c.founders, c.joins = founders, joins
	c.slotsInUse = c.slotsInUse[:0]
	for _, f := range founders {
		c.slotsInUse = append(c.slotsInUse, f.slot)
	}
	slices.Sort(dead)
	p.free = dead
	c.free = append(c.free, dead...)
}

// found makes item it the founder of a new group; a new row gets a slot
// (a released one if any) and is drawn into it.
func (c *compiler) found(p *stepProg, it liveItem) liveFounder {
	f := liveFounder{it: it, slot: it.slot}
	if it.slot >= 0 {
		return f
	}
	if len(c.free) > 0 {
		f.slot, c.free = c.free[len(c.free)-1], c.free[:len(c.free)-1]
	} else {
		f.slot = c.nslots
		c.nslots++
	}
	c.rep[f.slot] = it.tm.j
	p.alloc = append(p.alloc, f.slot)
	p.gen = append(p.gen, genTerm{j: it.tm.j, g: it.tm.g, slot: f.slot, into: -1})
	c.inSlot[it.tm.j] = true
	return f
}

// signature buckets a future column by its sparsity pattern and its values
// normalized by the first one, rounded to 8 significant digits (a merge is
// then confirmed by proportional).
func signature(rows []int, vals []float64) string {
	b := make([]byte, 0, 12*len(rows))
	for k, r := range rows {
		b = binary.AppendUvarint(b, uint64(r))
		x := vals[k] / vals[0]
		e := math.Floor(math.Log10(math.Abs(x)))
		mant := math.Round(x / math.Pow(10, e-7))
		b = binary.AppendVarint(b, int64(mant))
		b = binary.AppendVarint(b, int64(e))
	}
	return string(b)
}

// proportional reports whether the future column (r2, v2) is c = v2[0] /
// v1[0] times (r1, v1), entrywise to mergeTol times the column's largest
// entry (rounding residue of A^-1 B is absolute, not relative to each
// entry).
func proportional(r1 []int, v1 []float64, r2 []int, v2 []float64) bool {
	if !slices.Equal(r1, r2) {
		return false
	}
	c := v2[0] / v1[0]
	vmax := 0.0
	for _, x := range v2 {
		vmax = max(vmax, math.Abs(x))
	}
	for k := range v1 {
		if math.Abs(v2[k]-c*v1[k]) > mergeTol*vmax {
			return false
		}
	}
	return true
}

// peakSlots is the largest number of slots alive at once with no merging
// when the rows with lifetime last-first <= threshold are stored.
func (lc *liveCols) peakSlots(threshold int) int {
	delta := make([]int, lc.n+1)
	for j := range lc.first {
		if lc.last[j] > lc.first[j] && lc.last[j]-lc.first[j] <= threshold {
			delta[lc.first[j]]++
			delta[lc.last[j]+1]--
		}
	}
	cur, peak := 0, 0
	for _, v := range delta[:lc.n] {
		cur += v
		peak = max(peak, cur)
	}
	return peak
}

// newLive streams W_i = sum_j G[i,j] z_j (square: G = C^-1) in four
// steps: the memory plan (a fixed part per worker and one d-vector per
// held row of Z), the choice of method (a block of steps at a time for
// dense G, merged rows when they fit, else every row whose lifetime is at
// most the largest threshold that fits, regenerating the others), the
// kind that choice is reported as, and the source's assembly.
func newLive[T floatT](g *mat.Dense, square bool, d int, opt Options) (streamer[T], error) {
	lc, mech, err := newLiveCols(g)
	if err != nil {
		return nil, err
	}
	n, m := lc.n, lc.m
	// The kind is decided below; the placeholder gives the worker count
	// and element size for the memory plan.
	c, err := newCommon[T](KindSparseLive, n, m, d, opt)
	if err != nil {
		return nil, err
	}
	fits, err := liveBudget(c, d, m, opt.MemoryBudget)
	if err != nil {
		return nil, err
	}
	blocked := func() (streamer[T], bool, error) {
		tb := planBlock(lc, c, opt.MemoryBudget)
		if tb < 2 {
			return nil, false, nil
		}
		seed, err := newSeed(opt.Seed)
		if err != nil {
			return nil, false, err
		}
		c.mech = mech
		return newBlock[T](lc, c, tb, seed, square), true, nil
	}
	if lc.dense() && !square {
		// Dense tall G: blocks of steps beat holding all of Z even with
		// memory to spare (each step would read all m rows; a block is one
		// matrix product).
		if s, ok, err := blocked(); ok || err != nil {
			return s, err
		}
	}
	var lp livePlan
	if lc.mergeWorthwhile() {
		lp.prog, lp.eraseAt, lp.nslots = lc.compile(lc.multiUse(), true)
		lp.merged = fits(lp.nslots)
	}
	if lc.dense() && square && !lp.merged && !fits(lc.peakSlots(n)) {
		// C^-1 whose back substitution did not fit either.
		if s, ok, err := blocked(); ok || err != nil {
			return s, err
		}
	}
	multi, allFirst := lc.lifetimes()
	lp.stored, lp.plan = multi, "all"
	if !lp.merged {
		lp.thresholded(lc, fits)
	}
	c.kind = liveKind(lp.stored, multi, allFirst, square)
	seed, err := newSeed(opt.Seed)
	if err != nil {
		return nil, err
	}
	c.mech = mech
	c.plan = fingerprint(c.kind, lp.plan)
	return newLiveSource[T](lc, c, lp, seed), nil
}

// liveBudget is the memory plan of a live source: a fixed part (a shard
// of scratch per worker, 32 bytes of key per row of Z) and one d-vector
// per held row. fits says whether slots held rows fit opt.MemoryBudget (0:
// no budget); a budget below the fixed part is refused.
func liveBudget(c *common, d, m int, budget int64) (fits func(slots int) bool, err error) {
	shard := min(d, shardLen)
	fixed := int64(c.workers)*int64(shard)*int64(c.elem+8) + int64(m)*32
	perSlot := int64(d) * int64(c.elem)
	if budget > 0 && fixed > budget {
		return nil, invalidf("memory budget %d bytes is below the minimum %d for d = %d with %d workers", budget, fixed, d, c.workers)
	}
	return func(slots int) bool { return budget == 0 || fixed+int64(slots)*perSlot <= budget }, nil
}

// lifetimes counts the rows of Z used at more than one step (multi) and
// says whether every row is first used at step 0 (allFirst).
func (lc *liveCols) lifetimes() (multi int, allFirst bool) {
	allFirst = true
	for j := range lc.m {
		if lc.first[j] > 0 {
			allFirst = false
		}
		if lc.last[j] > lc.first[j] {
			multi++
		}
	}
	return multi, allFirst
}

// multiUse marks the rows of Z used at more than one step.
func (lc *liveCols) multiUse() []bool {
	store := make([]bool, lc.m)
	for j := range lc.m {
		store[j] = lc.last[j] > lc.first[j]
	}
	return store
}

// livePlan is the compiled method of a live source: the step programs,
// the keys to erase after each step, the slots held, whether rows were
// merged, how many rows are stored, and the plan's description for the
// state fingerprint ("all", or the lifetime threshold).
type livePlan struct {
	prog    []stepProg
	eraseAt [][]int
	nslots  int
	merged  bool
	stored  int
	plan    any
}

// thresholded stores the rows with lifetime <= threshold, the largest
// threshold that fits (the peak grows with it), and regenerates the rest.
func (lp *livePlan) thresholded(lc *liveCols, fits func(int) bool) {
	var lens []int
	for j := range lc.m {
		if lc.last[j] > lc.first[j] {
			lens = append(lens, lc.last[j]-lc.first[j])
		}
	}
	slices.Sort(lens)
	lens = slices.Compact(lens)
	lo, hi := 0, len(lens) // lens[:lo] fit, lens[hi:] do not
	for lo < hi {
		mid := (lo + hi) / 2
		if fits(lc.peakSlots(lens[mid])) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	threshold := -1
	if lo > 0 {
		threshold = lens[lo-1]
	}
	store := make([]bool, lc.m)
	lp.stored = 0
	for j := range lc.m {
		if lc.last[j] > lc.first[j] && lc.last[j]-lc.first[j] <= threshold {
			store[j] = true
			lp.stored++
		}
	}
	lp.prog, lp.eraseAt, lp.nslots = lc.compile(store, false)
	lp.plan = threshold
}

// liveKind is the kind a live source reports: regeneration when rows used
// more than once are not all stored, else pregenerated (every row first
// used at step 0) or sparse live.
func liveKind(stored, multi int, allFirst, square bool) string {
	switch {
	case stored < multi && stored == 0 && square:
		return KindDenseRegenerate
	case stored < multi && stored == 0:
		return KindTallRegenerate
	case stored < multi:
		return KindLiveRegenerate
	case allFirst && multi > 0:
		return KindTallPregenerated
	}
	return KindSparseLive
}

// newLiveSource assembles the source of plan lp with the row keys of seed.
func newLiveSource[T floatT](lc *liveCols, c *common, lp livePlan, seed key) *liveSource[T] {
	shard := min(c.d, shardLen)
	s := &liveSource[T]{common: c, prog: lp.prog, eraseAt: lp.eraseAt, nslots: lp.nslots, merged: lp.merged, nnz: lc.nnz}
	s.keys, _ = rowKeys(seed, lc.m)
	s.scratch = make([][]T, c.workers)
	s.acc = make([][]float64, c.workers)
	for w := range c.workers {
		s.scratch[w] = make([]T, shard)
		s.acc[w] = make([]float64, shard)
	}
	s.eraseBefore(0)
	for j := range lc.m {
		if lc.first[j] < 0 {
			s.keys[j] = key{}
		}
	}
	return s
}

// eraseBefore zeroes the keys no longer needed once step steps are done.
func (s *liveSource[T]) eraseBefore(step int) {
	for t := range step {
		for _, j := range s.eraseAt[t] {
			s.keys[j] = key{}
		}
	}
}

func (s *liveSource[T]) base() *common { return s.common }

func (s *liveSource[T]) memoryBytes() int64 {
	return int64(len(s.pool))*int64(s.d)*int64(s.elem) +
		int64(s.workers)*int64(len(s.acc[0]))*int64(s.elem+8) + int64(len(s.keys))*32
}

func (s *liveSource[T]) slotBuf(k int) []T {
	for len(s.pool) <= k {
		s.pool = append(s.pool, make([]T, s.d))
	}
	return s.pool[k]
}

func (s *liveSource[T]) next(dst []T) error {
	if err := s.checkNext(len(dst)); err != nil {
		return err
	}
	p := &s.prog[s.step]
	for _, k := range p.alloc {
		s.slotBuf(k)
	}
	s.forShards(func(w, sh int) {
		lo, hi := shardRange(sh, s.d)
		acc := s.acc[w][:hi-lo]
		clear(acc)
		for _, o := range p.out {
			accumulate(o.c, s.pool[o.slot][lo:hi], acc)
		}
		for _, gt := range p.gen {
			var z []T
			if gt.slot >= 0 {
				z = s.pool[gt.slot][lo:hi]
			} else {
				z = s.scratch[w][:hi-lo]
			}
			genShard(s.gens[w], s.keys[gt.j], sh, z)
			accumulate(gt.g, z, acc)
			if gt.into >= 0 {
				axpy(T(gt.c), z, s.pool[gt.into][lo:hi])
			}
		}
		for _, mg := range p.merges {
			axpy(T(mg.c), s.pool[mg.src][lo:hi], s.pool[mg.dst][lo:hi])
		}
		out := dst[lo:hi]
		for k := range out {
			out[k] = T(acc[k])
		}
	})
	for _, j := range s.eraseAt[s.step] {
		s.keys[j] = key{}
	}
	s.step++
	return nil
}

// accumulate is acc += g x in float64.
func accumulate[T floatT](g float64, x []T, acc []float64) {
	x = x[:len(acc)]
	for k := range acc {
		acc[k] += g * float64(x[k])
	}
}

// liveAt lists the slots holding data between steps step-1 and step.
func (s *liveSource[T]) liveAt(step int) []int {
	live := map[int]bool{}
	for t := range step {
		for _, k := range s.prog[t].alloc {
			live[k] = true
		}
		for _, k := range s.prog[t].free {
			delete(live, k)
		}
	}
	ks := make([]int, 0, len(live))
	for k := range live {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (s *liveSource[T]) appendState(b []byte) []byte {
	for _, k := range s.keys {
		b = append(b, k[:]...)
	}
	for _, k := range s.liveAt(s.step) {
		b = appendFloats(b, s.pool[k])
	}
	return b
}

func (s *liveSource[T]) stateSize(step int) int {
	return 32*len(s.keys) + len(s.liveAt(step))*s.d*s.elem
}

func (s *liveSource[T]) restoreState(r *reader) error {
	for j := range s.keys {
		s.keys[j] = r.key()
	}
	for _, k := range s.liveAt(s.step) {
		readFloats(r, s.slotBuf(k))
	}
	return r.err
}
