package accountant

import (
	"math"
	"sync"
)

// Random allocation (Feldman and Shenfeld 2025, arXiv 2502.08202; their
// PLD accounting, arXiv 2602.17284, is dp_accounting's
// RandomAllocationDpEvent): each example joins exactly one of t Gaussian
// steps, drawn uniformly. With Z_i = exp((x_i - 1/2)/sigma^2), the pair
// that dominates one such allocation of adaptive steps of sensitivity 1 is
// (docs/math.md, "Random allocation")
//
//	remove: L = log((Z_1 + Z_2 + ... + Z_t)/t), x_1 ~ N(1, s^2), the rest N(0, s^2),
//	add:    L = -log((Z_1 + ... + Z_t)/t),     all x_i ~ N(0, s^2),
//
// so log Z_i is normal: N(+mu, 2 mu) for the step holding the example (the
// "base") and N(-mu, 2 mu) for the others (the "dual"), mu = 1/(2 s^2).
// The loss is a log-sum-exp of independent normals; its distribution is
// computed on a grid of log-values by log-sum-exp convolutions, t-1 of them
// by binary powering, with every value rounded in the direction that
// raises the loss: the computed loss is at least the true one pointwise
// under a coupling, so the distribution dominates (each rounding moves mass
// up, never down), as the connect-the-dots grid does for the other
// mechanisms. Each rounding costs at most one grid step of loss; with
// about 2 log2(t) convolutions the loss is overstated by at most
// (2 log2(t) + 3) steps per allocation.

// logGrid is a distribution on the grid of log-values k*h: mass p[i] at
// index off+i, plus mass inf at the value that gives infinite loss.
type logGrid struct {
	off int
	p   []float64
	inf float64
}

// normalOnGrid discretizes N(m, s^2) on the grid of step h, every value
// rounded up (cell k holds (k-1)h < u <= kh) or down (kh <= u < (k+1)h),
// the tails beyond tau on each side clamped to the last cell on the side
// the rounding moves towards and sent to inf on the other.
func normalOnGrid(m, s, h, tau float64, up bool) logGrid {
	z := normTail(tau)
	lo, hi := m-z*s, m+z*s
	cdf := func(x float64) (float64, float64) { return gaussTails((x - m) / s) }
	mass := func(a, b float64) float64 {
		fa, sa := cdf(a)
		fb, sb := cdf(b)
		if a >= m {
			return math.Max(0, sa-sb)
		}
		return math.Max(0, fb-fa)
	}
	var g logGrid
	if up {
		k0, k1 := int(math.Ceil(lo/h)), int(math.Ceil(hi/h))
		g.off, g.p = k0, make([]float64, k1-k0+1)
		g.p[0], _ = cdf(float64(k0) * h)
		for k := k0 + 1; k <= k1; k++ {
			g.p[k-k0] = mass(float64(k-1)*h, float64(k)*h)
		}
		_, g.inf = cdf(float64(k1) * h)
		return g
	}
	k0, k1 := int(math.Floor(lo/h)), int(math.Floor(hi/h))
	g.off, g.p = k0, make([]float64, k1-k0+1)
	g.inf, _ = cdf(float64(k0) * h)
	for k := k0; k < k1; k++ {
		g.p[k-k0] = mass(float64(k)*h, float64(k+1)*h)
	}
	_, g.p[k1-k0] = cdf(float64(k1) * h)
	return g
}

// lseOffsets groups the differences d >= 0 of two grid indices by the
// number of cells c(d) that log(1 + e^(-d h)), rounded up or down, adds to
// the larger: group g covers d in [from[g], from[g+1]) (the last group all
// larger d) and adds add[g] cells.
type lseOffsets struct {
	from, add []int
}

func newLSEOffsets(h float64, up bool) lseOffsets {
	c := func(d int) int {
		x := math.Log1p(math.Exp(-float64(d)*h)) / h
		if up {
			return int(math.Ceil(x + 1e-9))
		}
		return max(0, int(math.Floor(x-1e-9)))
	}
	last := 0
	if up {
		last = 1
	}
	var o lseOffsets
	for d := 0; ; d++ {
		v := c(d)
		if len(o.add) == 0 || o.add[len(o.add)-1] != v {
			o.from = append(o.from, d)
			o.add = append(o.add, v)
		}
		if v == last {
			return o
		}
	}
}

// prefix returns the running sums of p, with a leading 0.
func prefix(p []float64) []float64 {
	s := make([]float64, len(p)+1)
	for i, v := range p {
		s[i+1] = s[i] + v
	}
	return s
}

// lseConv returns the distribution of log(e^a + e^b) for independent a ~ A
// and b ~ B, on the grid, rounded as o was built, then trimmed: the
// outermost cells holding at most tau on each side go to inf.
//
// With x the larger value (ties counted once) and d = I - J >= 0 the
// distance of the smaller one's index J below x's index I, the result's
// index is I + c(d), and c is constant on each group of o: group by group,
// every I receives x's mass times y's mass over the group's J, one
// difference of y's prefix sums. The prefix sums are padded on both sides
// (0 below y, y's total above it) so that the loop over I needs no bounds.
// Its cost is the number of groups (about ln 2/h) times the cells. When a
// and b are the same distribution (a squaring) the two orders contribute
// alike but for the ties, so one order is computed and doubled.
func lseConv(a, b logGrid, o lseOffsets, tau float64) logGrid {
	endA, endB := a.off+len(a.p)-1, b.off+len(b.p)-1
	lo := max(a.off, b.off) + o.add[len(o.add)-1]
	hi := max(endA, endB) + o.add[0]
	out := make([]float64, hi-lo+1)
	same := a.off == b.off && len(a.p) == len(b.p) && (len(a.p) == 0 || &a.p[0] == &b.p[0])
	if same {
		spreadLSE(out, lo, a, b, o, true)
		for i := range out {
			out[i] *= 2
		}
		// The ties, d = 0, once: group 0 adds o.add[0].
		shift := o.add[0] - lo + a.off
		for k, v := range a.p {
			out[k+shift] += v * v
		}
	} else {
		spreadLSE(out, lo, a, b, o, false)
		spreadLSE(out, lo, b, a, o, true)
	}
	r := logGrid{off: lo, p: out, inf: a.inf + b.inf - a.inf*b.inf}
	return r.trim(tau)
}

// spreadLSE adds to out (whose index 0 is grid index lo) the mass of the
// pairs in which x is the larger value (strictly, with strict), for every
// group of o.
func spreadLSE(out []float64, lo int, x, y logGrid, o lseOffsets, strict bool) {
	endX, endY := x.off+len(x.p)-1, y.off+len(y.p)-1
	// The last group's d is unbounded; every other group's J lies within
	// dmax of I.
	last := len(o.from) - 1
	dmax := o.from[last]
	// P[k] is y's mass at indices below base + k, for base + k in
	// [x.off - dmax + 1, max(endX, endY) + 1].
	base := min(x.off, y.off) - dmax + 1
	top := max(endX, endY) + 1
	P := make([]float64, top-base+1)
	s := 0.0
	for k := range P {
		if j := base + k - 1; j >= y.off && j <= endY {
			s += y.p[j-y.off]
		}
		P[k] = s
	}
	for g, d0 := range o.from {
		if strict && d0 == 0 {
			d0 = 1
		}
		// J = I - d for d in [d0, d1) lies in [y.off, endY] for some d
		// only if I >= y.off + d0 and I - d1 + 1 <= endY.
		iLo := max(x.off, y.off+d0)
		iHi := endX
		if g < last {
			d1 := o.from[g+1]
			if d0 >= d1 {
				continue
			}
			iHi = min(endX, endY+d1-1)
			if iLo > iHi {
				continue
			}
			n := iHi - iLo + 1
			xs := x.p[iLo-x.off : iLo-x.off+n]
			os := out[iLo+o.add[g]-lo : iLo+o.add[g]-lo+n]
			ph := P[iLo-d0+1-base : iLo-d0+1-base+n] // mass below J = I - d0 + 1
			pl := P[iLo-d1+1-base : iLo-d1+1-base+n] // mass below J = I - d1 + 1
			for k, v := range xs {
				if m := ph[k] - pl[k]; m > 0 {
					os[k] += v * m
				}
			}
			continue
		}
		if iLo > iHi {
			continue
		}
		// The last group: every J <= I - d0.
		n := iHi - iLo + 1
		xs := x.p[iLo-x.off : iLo-x.off+n]
		os := out[iLo+o.add[g]-lo : iLo+o.add[g]-lo+n]
		ph := P[iLo-d0+1-base : iLo-d0+1-base+n]
		for k, v := range xs {
			if m := ph[k]; m > 0 {
				os[k] += v * m
			}
		}
	}
}

// trim sends the outermost cells holding at most tau on each side to inf.
func (g logGrid) trim(tau float64) logGrid {
	i, s := 0, 0.0
	for i < len(g.p)-1 && s+g.p[i] <= tau {
		s += g.p[i]
		i++
	}
	j, s2 := len(g.p)-1, 0.0
	for j > i && s2+g.p[j] <= tau {
		s2 += g.p[j]
		j--
	}
	return logGrid{off: g.off + i, p: g.p[i : j+1], inf: g.inf + s + s2}
}

// lsePower returns the distribution of the log of the sum of n independent
// copies of e^g (n >= 1), by binary powering.
func lsePower(g logGrid, n int, o lseOffsets, tau float64) logGrid {
	var r logGrid
	have := false
	for n > 0 {
		if n&1 == 1 {
			if have {
				r = lseConv(r, g, o, tau)
			} else {
				r, have = g, true
			}
		}
		n >>= 1
		if n > 0 {
			g = lseConv(g, g, o, tau)
		}
	}
	return r
}

// allocationStages is the number of log-sum-exp convolutions of one
// direction: at most 2 floor(log2 n) for n - 1 or n copies, plus the base.
func allocationStages(t int) int {
	s := 0
	for n := t; n > 1; n >>= 1 {
		s += 2
	}
	return s + 1
}

// defaultAllocationInterval is PLDOptions.AllocationInterval's floor.
const defaultAllocationInterval = 3e-4

// discretizeAllocation returns the privacy loss distribution of one random
// allocation over c.alloc steps in direction dir on the loss grid of
// spacing step, dominating the true one, with at most tau of mass
// truncated (counted as infinite loss). The log-sums are computed on the
// grid of spacing h = j*step, j the multiple nearest to interval (at least
// 1), whose points are loss grid points.
func discretizeAllocation(c component, dir direction, step, interval, tau float64, maxBins int) (*pmf, error) {
	j := max(1, int(math.Round(interval/step)))
	h := float64(j) * step
	t, s := c.alloc, 1/c.sigma
	mu := s * s / 2
	// The loss distributions are as wide as log Z, about 2 z s, and
	// spread onto the loss grid j times longer.
	if w := 2 * normTail(tau/float64(4*t)) * s; w/step > float64(maxBins-2) {
		return nil, &tooFineError{minStep: w / float64(maxBins-2)}
	}
	stages := allocationStages(t)
	leafTau := tau / float64(4*t) // each tail of each of t leaves
	stageTau := tau / float64(4*stages)
	up := dir == remove
	o := newLSEOffsets(h, up)
	var sum logGrid
	if dir == remove {
		base := normalOnGrid(mu, s, h, leafTau, true)
		dual := normalOnGrid(-mu, s, h, leafTau, true)
		sum = lseConv(lsePower(dual, t-1, o, stageTau), base, o, stageTau)
	} else {
		dual := normalOnGrid(-mu, s, h, leafTau, false)
		sum = lsePower(dual, t, o, stageTau)
	}
	// The loss is log(sum) - log t (remove) or log t - log(sum) (add),
	// rounded up to the grid.
	// Cell i of the log-sum grid is cell j*i of the loss grid.
	lt := math.Log(float64(t)) / step
	n := len(sum.p)
	d := &pmf{step: step, inf: sum.inf, p: make([]float64, j*(n-1)+1)}
	if dir == remove {
		d.offset = j*sum.off - int(math.Floor(lt-1e-9))
		for i, v := range sum.p {
			d.p[j*i] = v
		}
	} else {
		d.offset = int(math.Ceil(lt+1e-9)) - j*(sum.off+n-1)
		for i, v := range sum.p {
			d.p[j*(n-1-i)] = v
		}
	}
	return d, nil
}

// allocTailShare is the share of PLDOptions.TailMass a random allocation's
// distribution may truncate, whatever the number of compositions, so that
// one distribution serves every epoch count; what it truncates is counted
// as infinite loss (pmf.inf) and so in the reported delta.
const allocTailShare = 1e-3

// allocCache holds the last few random-allocation distributions made.
type allocCache struct {
	mu   sync.Mutex
	keys []allocKey
	vals []*pmf
}

type allocKey struct {
	sigma               float64
	t                   int
	dir                 direction
	step, interval, tau float64
}

const allocCacheSize = 8

func (a *allocCache) get(c component, dir direction, step, interval, tau float64, maxBins int) (*pmf, error) {
	k := allocKey{sigma: c.sigma, t: c.alloc, dir: dir, step: step, interval: interval, tau: tau}
	a.mu.Lock()
	for i, x := range a.keys {
		if x == k {
			v := a.vals[i]
			a.mu.Unlock()
			return v, nil
		}
	}
	a.mu.Unlock()
	d, err := discretizeAllocation(c, dir, step, interval, tau, maxBins)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.keys) == allocCacheSize {
		a.keys, a.vals = a.keys[1:], a.vals[1:]
	}
	a.keys, a.vals = append(a.keys, k), append(a.vals, d)
	return d, nil
}

// warmAllocations computes the random allocations' distributions of both
// directions at the loss grid's spacing concurrently (each takes seconds),
// so that compose finds them in the cache; an error is left for compose
// to meet and report.
func (p *pldAccountant) warmAllocations(comps []component) {
	var wg sync.WaitGroup
	for _, c := range comps {
		if c.alloc <= 1 {
			continue
		}
		for _, dir := range []direction{remove, add} {
			wg.Go(func() {
				_, _ = p.allocs.get(c, dir, p.opt.DiscretizationInterval, p.opt.AllocationInterval, p.opt.TailMass*allocTailShare, p.opt.MaxBins)
			})
		}
	}
	wg.Wait()
}
