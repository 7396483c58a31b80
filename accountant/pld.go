package accountant

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"gonum.org/v1/gonum/dsp/fourier"
)

// PLDOptions configures NewPLD. The zero value gives defaults.
type PLDOptions struct {
	// DiscretizationInterval is the spacing of the privacy-loss grid;
	// 0 means 1e-4, as in dp_accounting. The discretization is pessimistic
	// at any spacing; a finer grid is tighter and slower. It is widened
	// automatically when a distribution would exceed MaxBins.
	DiscretizationInterval float64
	// TailMass bounds the probability mass dropped by truncating each
	// mechanism's loss distribution and the composed one; it is added to
	// the reported delta. 0 means 1e-15.
	TailMass float64
	// MaxBins caps the length of any loss grid; 0 means 1<<20 (8 MiB).
	MaxBins int
	// AllocationInterval is the spacing of the log-value grid on which a
	// random allocation's loss is computed (RandomAllocation), rounded to
	// a multiple of the loss grid's spacing; 0 means the larger of that
	// spacing and 3e-4. Its cost grows as the inverse square of the
	// spacing, and each of its about 2 log2(t) + 3 roundings overstates
	// the loss by at most one spacing (docs/math.md).
	AllocationInterval float64
}

func (o PLDOptions) withDefaults() PLDOptions {
	if o.DiscretizationInterval == 0 {
		o.DiscretizationInterval = 1e-4
	}
	if o.TailMass == 0 {
		o.TailMass = 1e-15
	}
	if o.MaxBins == 0 {
		o.MaxBins = 1 << 20
	}
	if o.AllocationInterval == 0 {
		o.AllocationInterval = math.Max(o.DiscretizationInterval, defaultAllocationInterval)
	}
	return o
}

func (o PLDOptions) check() error {
	if !(o.DiscretizationInterval > 0) || isInf(o.DiscretizationInterval) {
		return invalidf("pld: discretization interval %v, want finite and > 0", o.DiscretizationInterval)
	}
	if !(o.TailMass > 0 && o.TailMass < 1e-3) {
		return invalidf("pld: tail mass %v, want in (0, 1e-3)", o.TailMass)
	}
	if !(o.AllocationInterval > 0) || isInf(o.AllocationInterval) {
		return invalidf("pld: allocation interval %v, want finite and > 0", o.AllocationInterval)
	}
	if o.MaxBins < 1024 {
		return invalidf("pld: max bins %d, want >= 1024", o.MaxBins)
	}
	return nil
}

type pldAccountant struct {
	opt PLDOptions
	// plans caches FFT plans and their buffers by length; plans hold
	// scratch space, so each length has a pool rather than a single plan.
	mu    sync.Mutex
	plans map[int]*sync.Pool

	coarseOnce sync.Once
	coarser    *pldAccountant

	// allocs caches random allocations' loss distributions (read only
	// once made), which cost seconds and are asked for again by every
	// epoch count of one run (allocKey).
	allocs allocCache
}

// fftWork is an FFT plan of length len(seq) with buffers for composing.
type fftWork struct {
	fft        *fourier.FFT
	seq        []float64
	prod, coef []complex128
}

// NewPLD returns a privacy loss distribution accountant (Koskela et al.
// 2021; Doroshenko et al. 2022). Each mechanism's privacy loss is
// discretized on a grid by connect-the-dots, which preserves both
// distributions' mass in every grid cell and so dominates the true
// mechanism; compositions are computed by one FFT power per mechanism; all
// truncated mass is counted as infinite loss. Epsilon and Delta report the
// worse of the add and remove directions.
//
// Unsubsampled Gaussian steps compose exactly into one Gaussian (1/sigma^2
// = sum T_i/sigma_i^2), so an event without subsampling is accounted for
// by the exact formula of GaussianDelta, with no grid. Small multipliers
// have losses in the thousands or millions, far beyond e^709; these are
// handled in the log domain, and when a loss distribution would need more
// than MaxBins cells the grid spacing is doubled until it fits, which
// keeps the answer an upper bound but loosens it (by at most T spacings
// for the coarser rounding of every loss up to the grid). A loss beyond
// float64 (sigma below about 1e-154) gives epsilon +Inf; a multiplier
// above 1e100 is accounted as 1e100 (more noise is post-processing of
// less), whose epsilon is 0 at any usable delta.
//
// The bound is exact up to floating-point rounding. The FFT perturbs
// every cell of the composed distribution by about 1e-17, which over a
// million cells is as large as a delta of 1e-12 (dp_accounting has the
// same floor); where that noise could move the answer by more than 1e-4 of
// delta, the distribution is recomputed by an exponentially tilted FFT
// that has a small relative error around the answer. The accountant is
// safe for concurrent use.
func NewPLD(opt PLDOptions) Accountant {
	return &pldAccountant{opt: opt.withDefaults(), plans: map[int]*sync.Pool{}}
}

func (p *pldAccountant) Name() string { return "pld" }

func (p *pldAccountant) Epsilon(e Event, delta float64) (float64, error) {
	eps, _, err := p.epsilonUsed(e, delta)
	return eps, err
}

// pldUsed is what one evaluation actually used, for the ledger: the grid
// spacing (the widest of the two directions, after any widening; 0 for an
// exact Gaussian, which needs no grid) and whether the RDP bound, being
// smaller, was the answer.
type pldUsed struct {
	step  float64
	byRDP bool
}

// epsilonUsed is Epsilon and what it used.
func (p *pldAccountant) epsilonUsed(e Event, delta float64) (float64, pldUsed, error) {
	var used pldUsed
	if err := checkDelta(delta); err != nil {
		return 0, used, fmt.Errorf("pld: %w", err)
	}
	dists, err := p.distributions(e)
	if err != nil {
		return 0, used, err
	}
	for _, d := range dists {
		if pm, ok := d.(*pmf); ok {
			used.step = math.Max(used.step, pm.step)
		}
	}
	eps, byRDP := p.epsilonAtBy(e, dists, delta)
	used.byRDP = byRDP
	if math.IsNaN(eps) || eps < 0 {
		return 0, used, fmt.Errorf("accountant: pld: numerical failure: epsilon %v: %w", eps, ErrUnsupported)
	}
	return eps, used, nil
}

func (p *pldAccountant) Delta(e Event, eps float64) (float64, error) {
	if err := checkEps(eps); err != nil {
		return 0, fmt.Errorf("pld: %w", err)
	}
	dists, err := p.distributions(e)
	if err != nil {
		return 0, err
	}
	delta := p.deltaAt(e, dists, eps)
	if math.IsNaN(delta) || delta < 0 {
		return 0, fmt.Errorf("accountant: pld: numerical failure: delta %v: %w", delta, ErrUnsupported)
	}
	return math.Min(1, delta), nil
}

// epsilonAt is Epsilon on e's distributions. The RDP bound of the same
// event is also valid, and it is the smaller where the grid had to be
// widened far (small multipliers over a million steps) or rounding
// limits the PLD (tiny deltas with rare participation, see epsilonOf);
// the smaller is reported. RDP costs about a millisecond, a few percent
// of a PLD evaluation. An exact Gaussian needs no such check.
func (p *pldAccountant) epsilonAt(e Event, dists []lossDist, delta float64) float64 {
	eps, _ := p.epsilonAtBy(e, dists, delta)
	return eps
}

// epsilonAtBy is epsilonAt, also saying whether the RDP bound was smaller.
func (p *pldAccountant) epsilonAtBy(e Event, dists []lossDist, delta float64) (eps float64, byRDP bool) {
	eps, _ = p.epsilonOf(dists, delta)
	// +Inf (delta below the truncated tail mass) stays as documented.
	if _, exact := dists[0].(gaussLoss); !exact && !math.IsInf(eps, 1) {
		if r, err := NewRDP(nil).Epsilon(e, delta); err == nil && r < eps {
			eps, byRDP = r, true
		}
	}
	return eps, byRDP
}

// deltaAt is Delta on e's distributions, with RDP as in epsilonAt.
func (p *pldAccountant) deltaAt(e Event, dists []lossDist, eps float64) float64 {
	delta := p.deltaOf(dists, eps)
	if _, exact := dists[0].(gaussLoss); !exact {
		if r, err := NewRDP(nil).Delta(e, eps); err == nil && r < delta {
			delta = r
		}
	}
	return delta
}

// noiseTol is the FFT rounding error, relative to delta, above which an
// answer is recomputed by a tilted FFT (refine).
const noiseTol = 1e-4

// epsilonOf returns the worse epsilon at delta over the directions. Where
// the FFT's rounding noise, about 1e-17 per cell and more after many
// compositions, could move delta by more than noiseTol of itself (deltas
// of 1e-12 over a million cells), the distribution is recomputed
// accurately around the answer (refine); where even that cannot bring the
// noise down, the answer counts the noise bound as privacy loss, so it
// stays an upper bound, only looser, and loose is set.
func (p *pldAccountant) epsilonOf(dists []lossDist, delta float64) (eps float64, loose bool) {
	for _, d := range dists {
		e := d.epsilon(delta)
		if pm, ok := d.(*pmf); ok && pm.src != nil && pm.noiseAbove(e) > noiseTol*delta && !isInf(e) {
			// The noisy answer may be far off; refine at it, then at the
			// better answer, until it settles.
			var r *pmf
			for range 3 {
				r = p.refine(pm, e)
				next := r.epsilon(delta)
				done := r.errs == nil || math.Abs(next-e) <= 1e-4*math.Max(1, e)
				e = next
				if done {
					break
				}
			}
			if r.noiseAbove(e) > noiseTol*delta {
				e, loose = math.Max(e, r.safeEpsilon(delta)), true
			}
		}
		eps = math.Max(eps, e)
	}
	return eps, loose
}

// deltaOf returns the worse delta at eps over the directions, refined as
// in epsilonOf.
func (p *pldAccountant) deltaOf(dists []lossDist, eps float64) (delta float64) {
	for _, d := range dists {
		v := d.delta(eps)
		if pm, ok := d.(*pmf); ok && pm.src != nil && pm.noiseAbove(eps) > noiseTol*v {
			r := p.refine(pm, eps)
			v = r.delta(eps)
			if n := r.noiseAbove(eps); n > noiseTol*v {
				v += n
			}
		}
		delta = math.Max(delta, v)
	}
	return delta
}

// coarse returns an accountant on a grid ten times coarser, which Calibrate
// uses to bracket sigma cheaply: its answers dominate this one's.
func (p *pldAccountant) coarse() Accountant {
	p.coarseOnce.Do(func() {
		o := p.opt
		o.DiscretizationInterval *= 10
		p.coarser = &pldAccountant{opt: o, plans: map[int]*sync.Pool{}}
	})
	return p.coarser
}

func (p *pldAccountant) plan(n int) *fftWork {
	p.mu.Lock()
	pool := p.plans[n]
	if pool == nil {
		pool = &sync.Pool{New: func() any {
			return &fftWork{fft: fourier.NewFFT(n), seq: make([]float64, n),
				prod: make([]complex128, n/2+1), coef: make([]complex128, n/2+1)}
		}}
		p.plans[n] = pool
	}
	p.mu.Unlock()
	return pool.Get().(*fftWork)
}

func (p *pldAccountant) release(w *fftWork) {
	p.mu.Lock()
	pool := p.plans[len(w.seq)]
	p.mu.Unlock()
	pool.Put(w)
}

// direction selects the ordered pair of output distributions (P, Q) whose
// privacy loss log(P/Q) is tracked: with M the subsampled mixture
// (1-q) N(0, s^2) + q N(1, s^2) and N = N(0, s^2), remove is (M, N) and add
// is (N, M).
type direction int

const (
	remove direction = iota
	add
)

// pmf is a discrete privacy loss distribution: mass p[i] at loss
// (offset+i)*step, plus mass inf at infinite loss.
type pmf struct {
	offset int
	step   float64
	p      []float64
	inf    float64
	// noise estimates the FFT rounding error of each cell (0 when the
	// distribution was not composed by FFT), and src, when not nil, is
	// what it was composed from, for refine. A refined pmf has instead an
	// error bound per cell in errs.
	noise float64
	src   *composition
	errs  []float64
}

// cellErr bounds the rounding error of cell i.
func (d *pmf) cellErr(i int) float64 {
	if d.errs != nil {
		return d.errs[i]
	}
	return d.noise
}

// composition is what an FFT-composed pmf was computed from.
type composition struct {
	steps   []*pmf
	comps   []component
	base    int
	dir     direction
	tauStep float64 // the tail mass each step's discretization dropped
}

// noiseAbove bounds the FFT rounding error in delta(eps) and in the
// epsilon at a delta: the noise of every cell above loss l.
func (d *pmf) noiseAbove(l float64) float64 {
	i := int(math.Floor(l/d.step)) - d.offset + 1
	i = min(max(i, 0), len(d.p))
	if d.errs == nil {
		return d.noise * float64(len(d.p)-i)
	}
	s := 0.0
	for ; i < len(d.p); i++ {
		s += d.cellErr(i)
	}
	return s
}

// safeEpsilon returns the smallest grid loss eps >= 0 with delta(eps) plus
// the rounding error of the cells above it at most target: an epsilon that
// holds whatever the rounding did.
func (d *pmf) safeEpsilon(target float64) float64 {
	if d.inf > target {
		return math.Inf(1)
	}
	decay := math.Exp(-d.step)
	// At loss l_i, with sp, s = e^(l_i+1) sum p_j e^-l_j and err over
	// the cells j > i: delta(l_i) = inf + sp - e^-step s.
	sp, s, err := 0.0, 0.0, 0.0
	for i := len(d.p) - 1; i >= 0; i-- {
		l := float64(d.offset+i) * d.step
		if d.inf+sp-decay*s+err > target {
			return math.Max(0, l+d.step)
		}
		sp += d.p[i]
		s = s*decay + d.p[i]
		err += d.cellErr(i)
	}
	return math.Max(0, float64(d.offset)*d.step)
}

// delta returns the hockey-stick divergence at eps:
// inf + sum over losses l > eps of p(l) (1 - e^(eps - l)).
func (d *pmf) delta(eps float64) float64 {
	s := d.inf
	for i := len(d.p) - 1; i >= 0; i-- {
		l := float64(d.offset+i) * d.step
		if l <= eps {
			break
		}
		s += d.p[i] * -math.Expm1(eps-l)
	}
	return s
}

// epsilon returns the smallest eps >= 0 with delta(eps) <= target.
//
// Between consecutive grid losses delta(eps) = inf + sp - e^eps sq, with sp
// and sq the sums of p and p e^-l over the losses above eps. Losses reach
// thousands, where e^l and e^-l leave float64, so the scan from the top
// keeps s = e^l sq, which lies in [0, sp]: moving one cell down multiplies
// it by e^-step and adds the cell's mass.
func (d *pmf) epsilon(target float64) float64 {
	if d.inf > target {
		return math.Inf(1)
	}
	decay := math.Exp(-d.step)
	sp, s := 0.0, 0.0
	for i := len(d.p) - 1; i >= 0; i-- {
		l := float64(d.offset+i) * d.step
		sp += d.p[i]
		s = s*decay + d.p[i]
		// delta at the loss one cell below is inf + sp - e^-step s.
		if i == 0 || l-d.step < 0 || d.inf+sp-decay*s > target {
			// The solution lies in (l - step, l]: e^(eps-l) s = inf + sp - target.
			v := (d.inf + sp - target) / s
			if s == 0 || v <= 0 {
				return math.Max(0, l)
			}
			return math.Max(0, math.Min(l, l+math.Log(v)))
		}
	}
	return 0
}

// A lossDist is the privacy loss distribution of a composed event in one
// direction, as the accountant evaluates it.
type lossDist interface {
	epsilon(delta float64) float64
	delta(eps float64) float64
}

// gaussLoss is the exact privacy loss of a Gaussian mechanism with
// multiplier sigma, which is what composed unsubsampled Gaussians are.
// sigma = 0 (the multipliers underflowed) has infinite loss.
type gaussLoss struct{ sigma float64 }

func (g gaussLoss) epsilon(delta float64) float64 {
	if g.sigma == 0 {
		return math.Inf(1)
	}
	return gaussianEpsilon(g.sigma, delta)
}

func (g gaussLoss) delta(eps float64) float64 {
	if g.sigma == 0 {
		return 1
	}
	return gaussianDelta(g.sigma, eps)
}

// infiniteLoss is a distribution whose losses overflow float64: no finite
// epsilon is certified.
type infiniteLoss struct{}

func (infiniteLoss) epsilon(float64) float64 { return math.Inf(1) }
func (infiniteLoss) delta(float64) float64   { return 1 }

// mergeGaussians replaces the unsubsampled components by one: the privacy
// loss of a Gaussian with multiplier sigma_i is N(mu_i, 2 mu_i) with mu_i =
// 1/(2 sigma_i^2), so T_i compositions of each have the loss of a single
// Gaussian with 1/sigma^2 = sum T_i/sigma_i^2, exactly. A single Gaussian
// needs no grid, and a composition with subsampled steps then discretizes
// one Gaussian instead of many.
func mergeGaussians(comps []component) []component {
	var out []component
	inv := 0.0 // sum T_i / sigma_i^2, accumulated as sum T_i (1/sigma_i)^2
	n := 0
	for _, c := range comps {
		if c.q < 1 || c.alloc > 1 {
			out = append(out, c)
			continue
		}
		r := 1 / c.sigma
		inv += float64(c.count) * r * r
		n++
	}
	if n == 0 {
		return out
	}
	return append(out, component{sigma: 1 / math.Sqrt(inv), q: 1, count: 1})
}

// distributions returns the composed loss distributions of e in both
// directions (one when they coincide, i.e. without subsampling).
func (p *pldAccountant) distributions(e Event) ([]lossDist, error) {
	if err := p.opt.check(); err != nil {
		return nil, err
	}
	comps, err := components(e)
	if err != nil {
		return nil, fmt.Errorf("pld: %w", err)
	}
	for i := range comps {
		// More noise is post-processing of less (add independent
		// Gaussian noise of variance sigma^2 - maxPLDSigma^2), so a larger
		// multiplier is accounted as maxPLDSigma: sigma^2 overflows beyond
		// about 1e154, and the loss, below 1e-200, is 0 at any grid.
		comps[i].sigma = math.Min(comps[i].sigma, maxPLDSigma)
	}
	comps = mergeGaussians(comps)
	if len(comps) == 1 && comps[0].q == 1 && comps[0].alloc == 0 {
		s := comps[0].sigma
		if isInf(s) {
			s = 0
		}
		return []lossDist{gaussLoss{sigma: s}}, nil
	}
	for _, c := range comps {
		// 1/(2 sigma^2) overflows: the loss itself is beyond float64.
		if r := 1 / c.sigma; isInf(r * r) {
			return []lossDist{infiniteLoss{}}, nil
		}
	}
	p.warmAllocations(comps)
	var out []lossDist
	for _, dir := range []direction{remove, add} {
		d, err := p.compose(comps, dir)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// maxPLDSigma is the largest multiplier the PLD accountant computes with;
// larger ones are accounted as maxPLDSigma (distributions).
const maxPLDSigma = 1e100

// lossRange returns the loss interval outside which a single mechanism
// carries at most tau of P-mass on each side.
func lossRange(c component, dir direction, tau float64) (lo, hi float64) {
	z := normTail(tau)
	s := c.sigma
	switch dir {
	case remove: // P = M; M's CDF lies between those of N(0) and N(1).
		return lossRemove(c, -s*z), lossRemove(c, 1+s*z)
	default: // P = N(0); the loss decreases in x.
		return -lossRemove(c, s*z), -lossRemove(c, -s*z)
	}
}

// lossRemove is the privacy loss log(M(x)/N(x)) = log(1-q + q e^((2x-1)/(2 s^2))).
func lossRemove(c component, x float64) float64 {
	u := (2*x - 1) / (2 * c.sigma * c.sigma)
	if c.q == 1 {
		return u
	}
	return logAddExp(math.Log1p(-c.q), math.Log(c.q)+u)
}

// xOfLoss inverts lossRemove: the x with log(1-q + q e^((2x-1)/(2 s^2))) = u,
// or -Inf when u is at or below the loss's infimum log(1-q).
func xOfLoss(c component, u float64) float64 {
	s2 := c.sigma * c.sigma
	if c.q == 1 {
		return s2*u + 0.5
	}
	// log(e^u - (1-q)), computed without cancellation on both sides of 0.
	var h float64
	if u > 0.5 {
		h = u + math.Log1p(-(1-c.q)*math.Exp(-u))
	} else {
		v := math.Expm1(u) + c.q
		if v <= 0 {
			return math.Inf(-1)
		}
		h = math.Log(v)
	}
	return s2*(h-math.Log(c.q)) + 0.5
}

// gaussTails returns Phi(z) and 1 - Phi(z), each computed directly where it
// is the small one so that differences of tails keep their precision.
func gaussTails(z float64) (cdf, sf float64) {
	if math.IsInf(z, -1) {
		return 0, 1
	}
	if z < 0 {
		cdf = normCDF(z)
		return cdf, 1 - cdf
	}
	sf = normCDF(-z)
	return 1 - sf, sf
}

// logGaussTails is gaussTails in logs: the small side from the log-domain
// tail, exact far beyond where Phi underflows.
func logGaussTails(z float64) (lcdf, lsf float64) {
	switch {
	case math.IsInf(z, -1):
		return math.Inf(-1), 0
	case math.IsInf(z, 1):
		return 0, math.Inf(-1)
	case z < 0:
		lcdf = logNormCDF(z)
		return lcdf, math.Log1p(-math.Exp(lcdf))
	}
	lsf = logNormCDF(-z)
	return math.Log1p(-math.Exp(lsf)), lsf
}

// edge holds the CDF and survival function of N(0, s^2), of N(1, s^2) and
// of the mixture M at one x, or their logs.
type edge struct{ nF, nS, n1F, n1S, mF, mS float64 }

func edgeAt(c component, x float64) edge {
	f0, s0 := gaussTails(x / c.sigma)
	f1, s1 := gaussTails((x - 1) / c.sigma)
	return edge{nF: f0, nS: s0, n1F: f1, n1S: s1, mF: (1-c.q)*f0 + c.q*f1, mS: (1-c.q)*s0 + c.q*s1}
}

func logEdgeAt(c component, x float64) edge {
	f0, s0 := logGaussTails(x / c.sigma)
	f1, s1 := logGaussTails((x - 1) / c.sigma)
	e := edge{nF: f0, nS: s0, n1F: f1, n1S: s1, mF: f1, mS: s1}
	if c.q < 1 {
		lq, l1q := math.Log(c.q), math.Log1p(-c.q)
		e.mF = logAddExp(l1q+f0, lq+f1)
		e.mS = logAddExp(l1q+s0, lq+s1)
	}
	return e
}

// between returns the mass of (a, b] from its CDF and survival values,
// differencing whichever side is small, and that side's smaller value.
func between(fa, sa, fb, sb float64) (m, small float64) {
	if sa < 0.5 {
		return math.Max(0, sa-sb), sb
	}
	return math.Max(0, fb-fa), fa
}

// logBetween is between in logs; -Inf when rounding erased the mass.
func logBetween(fa, sa, fb, sb float64) float64 {
	if sa < -math.Ln2 {
		return logSubExp(sa, sb)
	}
	return logSubExp(fb, fa)
}

// minNormalTail is the smallest tail value whose differences keep full
// precision in linear form; cells with smaller tails are computed in logs.
const minNormalTail = 1e-280

// discretize returns a pessimistic discrete loss distribution of one
// mechanism on the grid step*Z: every grid cell's P- and Q-mass is moved to
// its two end points so that both are preserved ("connect the dots"), mass
// below the grid is moved up to its first point and mass above it becomes
// infinite loss.
//
// Cells come from differences of Gaussian tails. At the losses of small
// multipliers (hundreds and more) the Q-mass of a cell lies tens of
// standard deviations out, where tails are subnormal or zero while e^loss
// times them is not small; such cells are computed in logs.
//
// With parts not nil (remove direction only), discretize also returns in
// it the distributions A and B of the loss when the example is absent from
// the step (x from N(0, s^2)) and present (x from N(1, s^2)), each cell's
// mass split between its end points in the same ratio, so that (1-q) A +
// q B is exactly the returned distribution.
func discretize(c component, dir direction, step, tau float64, maxBins int, parts *[2]*pmf) (*pmf, error) {
	lo, hi := lossRange(c, dir, tau)
	if isInf(lo) || isInf(hi) {
		return nil, fmt.Errorf("accountant: pld: loss range [%v, %v] of sigma %v, q %v is not finite: %w", lo, hi, c.sigma, c.q, ErrUnsupported)
	}
	if (hi-lo)/step > float64(maxBins-2) || math.Max(-lo, hi)/step > 1<<52 {
		return nil, &tooFineError{minStep: math.Max((hi-lo)/float64(maxBins-2), math.Max(-lo, hi)/(1<<52))}
	}
	// The grid reaches strictly beyond [lo, hi] widened by their rounding
	// (a few ulps of log(1-q) and log q: at large multipliers the true
	// losses, below 1e-16, round to 0 or below it, and a grid ending at
	// the rounded hi would send half the mass to infinite loss).
	pad := 0x1p-40 * (1 + math.Abs(math.Log(c.q)) + math.Abs(lo) + math.Abs(hi))
	i0, i1 := int(math.Ceil((lo-pad)/step))-1, int(math.Floor((hi+pad)/step))+1
	n := i1 - i0 + 1
	d := &pmf{offset: i0, step: step, p: make([]float64, n)}
	var pa, pb *pmf
	if parts != nil {
		pa = &pmf{offset: i0, step: step, p: make([]float64, n)}
		pb = &pmf{offset: i0, step: step, p: make([]float64, n)}
		parts[0], parts[1] = pa, pb
	}
	// x at each grid loss, and the CDFs there. For remove, the loss cell
	// (l_i, l_i+1] is x in (x_i, x_i+1]; for add, x in [x_i+1, x_i).
	xs := make([]float64, n)
	edges := make([]edge, n)
	for i := range edges {
		l := float64(i0+i) * step
		if dir == remove {
			xs[i] = xOfLoss(c, l)
		} else {
			xs[i] = xOfLoss(c, -l)
		}
		edges[i] = edgeAt(c, xs[i])
	}
	shrink := -math.Expm1(-step) // 1 - e^-step
	// Masses u at l_i and v at l_i+1 with u + v = pm and
	// u e^-l_i + v e^-l_i+1 = qm: v = (pm - e^l_i qm) / (1 - e^-step).
	var logNext edge
	haveNext := false
	for i := 0; i < n-1; i++ {
		a, b := edges[i], edges[i+1]
		l := float64(i0+i) * step
		var pm, qm, ps, qs float64
		if dir == remove {
			pm, ps = between(a.mF, a.mS, b.mF, b.mS)
			qm, qs = between(a.nF, a.nS, b.nF, b.nS)
		} else {
			// x decreases with the loss, so cell i is (x_i+1, x_i].
			pm, ps = between(b.nF, b.nS, a.nF, a.nS)
			qm, qs = between(b.mF, b.mS, a.mF, a.mS)
		}
		var v float64
		if math.Min(ps, qs) >= minNormalTail {
			haveNext = false
			if pm == 0 {
				continue
			}
			elq := 0.0 // e^l qm, in one exponential where e^l overflows
			if l < 700 {
				elq = math.Exp(l) * qm
			} else if qm > 0 {
				elq = math.Exp(l + math.Log(qm))
			}
			v = (pm - elq) / shrink
			if pa != nil {
				n1m, _ := between(a.n1F, a.n1S, b.n1F, b.n1S)
				splitCell(pa, pb, i, qm, n1m, math.Min(1, math.Max(0, v/pm)))
			}
		} else {
			la := logNext
			if !haveNext {
				la = logEdgeAt(c, xs[i])
			}
			logNext, haveNext = logEdgeAt(c, xs[i+1]), true
			lb := logNext
			var lpm, lqm float64
			if dir == remove {
				lpm, lqm = logBetween(la.mF, la.mS, lb.mF, lb.mS), logBetween(la.nF, la.nS, lb.nF, lb.nS)
			} else {
				lpm, lqm = logBetween(lb.nF, lb.nS, la.nF, la.nS), logBetween(lb.mF, lb.mS, la.mF, la.mS)
			}
			if math.IsInf(lpm, -1) {
				continue
			}
			pm = math.Exp(lpm)
			v = pm * -math.Expm1(l+lqm-lpm) / shrink
			if pa != nil {
				n1m := math.Exp(logBetween(la.n1F, la.n1S, lb.n1F, lb.n1S))
				splitCell(pa, pb, i, math.Exp(lqm), n1m, math.Min(1, math.Max(0, v/pm)))
			}
		}
		v = math.Min(pm, math.Max(0, v))
		d.p[i] += pm - v
		d.p[i+1] += v
	}
	first, last := edges[0], edges[n-1]
	if dir == remove {
		d.p[0] += first.mF
		d.inf = last.mS
		if pa != nil {
			pa.p[0] += first.nF
			pa.inf = last.nS
			pb.p[0] += first.n1F
			pb.inf = last.n1S
		}
	} else {
		d.p[0] += first.nS
		d.inf = last.nF
	}
	return d, nil
}

// splitCell moves the masses a and b of cell i of the parts A and B to its
// end points, the fraction up to the upper one.
func splitCell(pa, pb *pmf, i int, a, b, up float64) {
	pa.p[i] += a * (1 - up)
	pa.p[i+1] += a * up
	pb.p[i] += b * (1 - up)
	pb.p[i+1] += b * up
}

// tooFineError reports that a grid would exceed MaxBins; minStep is the
// smallest spacing that might fit.
type tooFineError struct{ minStep float64 }

func (e *tooFineError) Error() string {
	return fmt.Sprintf("accountant: pld: grid too fine (need spacing >= %g)", e.minStep)
}

// compose returns the loss distribution of all components in one
// direction, widening the grid by powers of two if it would exceed MaxBins.
// Smaller multipliers have wider losses and so never get a finer grid,
// which keeps epsilon monotone in sigma.
func (p *pldAccountant) compose(comps []component, dir direction) (*pmf, error) {
	step := p.opt.DiscretizationInterval
	for tries := 0; tries < 64; tries++ {
		d, err := p.composeAt(comps, dir, step)
		var tf *tooFineError
		if errors.As(err, &tf) {
			next := 2 * step
			for next < tf.minStep && !isInf(next) {
				next *= 2
			}
			step = next
			continue
		}
		return d, err
	}
	return nil, fmt.Errorf("accountant: pld: loss distribution too wide to discretize: %w", ErrUnsupported)
}

func (p *pldAccountant) composeAt(comps []component, dir direction, step float64) (*pmf, error) {
	total := 0
	for _, c := range comps {
		total += c.count
	}
	tau := p.opt.TailMass
	steps := make([]*pmf, len(comps))
	logKeep := 0.0 // log of the probability that no step lands at infinity
	base := 0
	for k, c := range comps {
		var d *pmf
		var err error
		if c.alloc > 1 {
			d, err = p.allocs.get(c, dir, step, p.opt.AllocationInterval, p.opt.TailMass*allocTailShare, p.opt.MaxBins)
		} else {
			d, err = discretize(c, dir, step, tau/float64(total), p.opt.MaxBins, nil)
		}
		if err != nil {
			return nil, err
		}
		steps[k] = d
		logKeep += float64(c.count) * math.Log1p(-d.inf)
		base += c.count * d.offset
	}
	if len(comps) == 1 && comps[0].count == 1 {
		return steps[0], nil // nothing to compose
	}
	lower, upper := chernoffWindow(steps, comps, tau/2)
	n := upper - lower + 1
	if n > p.opt.MaxBins {
		return nil, &tooFineError{minStep: step * float64(n) / float64(p.opt.MaxBins)}
	}
	vals := p.cyclicCompose(steps, comps, lower, upper, base, 0, nil)
	out := &pmf{offset: lower, step: step, p: vals,
		src: &composition{steps: steps, comps: comps, base: base, dir: dir, tauStep: tau / float64(total)}}
	mass, peak, neg := 0.0, 0.0, 0.0
	for i, v := range vals {
		mass += v
		if v > peak {
			peak = v
		}
		// Rounding in the FFT leaves noise of about 1e-17 per cell
		// (about 1e-12 in total in our tests); negative cells, which
		// show its size, are clamped to zero.
		if v < 0 {
			if -v > neg {
				neg = -v
			}
			vals[i] = 0
		}
	}
	out.noise = neg
	// The power z^T of each Fourier coefficient carries T times its
	// rounding error, and cells well above the noise do not show it as
	// negatives: floor the estimate at T eps_mach of the peak.
	out.noise = math.Max(out.noise, float64(total)*0x1p-52*peak)
	// The window holds all finite mass but at most tau.
	if !(math.Abs(mass-math.Exp(logKeep)) < 1e-6) {
		return nil, fmt.Errorf("accountant: pld: numerical failure: composed distribution has mass %v: %w", mass, ErrUnsupported)
	}
	// Mass outside the window (at most tau/2 each side) may have aliased
	// into it or be missing from it; counting it as infinite loss keeps
	// the result pessimistic.
	out.inf = -math.Expm1(logKeep) + tau
	return out, nil
}

// cyclicCompose returns the composition of the steps' distributions on
// the window [lower, upper] of grid indices, unclamped (rounding leaves
// cells of either sign). With lam > 0 each step's distribution is first
// tilted to p_i e^(lam l_i - logZ_k), which is again a distribution; the
// composition of tilted distributions is the tilted composition.
func (p *pldAccountant) cyclicCompose(steps []*pmf, comps []component, lower, upper, base int, lam float64, logZ []float64) []float64 {
	n := upper - lower + 1
	size := fftSize(n)
	work := p.plan(size)
	defer p.release(work)
	fft, seq, prod, coef := work.fft, work.seq, work.prod, work.coef
	for k, d := range steps {
		clear(seq)
		// Fold the single-step distribution onto the cycle; composition is
		// a cyclic convolution, exact on the window up to the mass outside.
		for i, v := range d.p {
			if lam != 0 && v > 0 {
				v = math.Exp(math.Log(v) + lam*float64(d.offset+i)*d.step - logZ[k])
			}
			seq[i%size] += v
		}
		fft.Coefficients(coef, seq)
		t := float64(comps[k].count)
		for j, z := range coef {
			var w complex128
			// High frequencies of a smooth distribution vanish under the
			// power; skip the trigonometry for them.
			if lr := t * math.Log(math.Hypot(real(z), imag(z))); lr > -745 {
				sin, cos := math.Sincos(t * math.Atan2(imag(z), real(z)))
				m := math.Exp(lr)
				w = complex(m*cos, m*sin)
			}
			if k == 0 {
				prod[j] = w
			} else {
				prod[j] *= w
			}
		}
	}
	fft.Sequence(seq, prod)
	out := make([]float64, n)
	inv := 1 / float64(size)
	for s := lower; s <= upper; s++ {
		j := (s - base) % size
		if j < 0 {
			j += size
		}
		out[s-lower] = seq[j] * inv
	}
	return out
}

// refine returns d recomputed so that cells near and above loss l carry a
// small relative rounding error instead of the FFT's absolute one, with a
// per-cell error bound: by binomial where the event has that shape, else
// by composeAccurate on d's window.
func (p *pldAccountant) refine(d *pmf, l float64) *pmf {
	if b := p.binomial(d); b != nil {
		return b
	}
	src := d.src
	lower, upper := d.offset, d.offset+len(d.p)-1
	vals, errs := p.composeAccurate(src.steps, src.comps, lower, upper, src.base, l, d.p, d.noise)
	return &pmf{offset: d.offset, step: d.step, p: vals, inf: d.inf, errs: errs}
}

// composeAccurate composes the steps on the window [lower, upper] of grid
// indices twice, plainly and with every step tilted by e^(lam l) at the
// Chernoff lambda of loss l (which moves the composed bulk to l), and
// returns per cell whichever value has the smaller error bound, and that
// bound; plain, when not nil, is the plain composition already computed,
// with its noise. The plain FFT errs by about T eps_mach of the peak in every cell;
// the tilted one by that much of the tilted peak, which untilting
// multiplies by e^(K - lam l_i): small relative error around l. This is
// the exponential tilting of importance sampling applied to the FFT.
func (p *pldAccountant) composeAccurate(steps []*pmf, comps []component, lower, upper, base int, l float64, plain []float64, noise float64) (vals, errs []float64) {
	total, maxIdx := 0, base
	for k, st := range steps {
		total += comps[k].count
		maxIdx += comps[k].count * (len(st.p) - 1)
	}
	if plain != nil {
		vals = slices.Clone(plain)
	} else {
		vals = p.cyclicCompose(steps, comps, lower, upper, base, 0, nil)
		peak := 0.0
		for i, v := range vals {
			if v > peak {
				peak = v
			}
			if v < 0 {
				noise = math.Max(noise, -v)
				vals[i] = 0
			}
		}
		noise = math.Max(noise, float64(total)*0x1p-52*peak)
	}
	errs = make([]float64, len(vals))
	for i := range errs {
		errs[i] = noise
	}
	// Finer coarse copies than the window's: the bounds below round every
	// step's loss by a coarse bin, T times over.
	m := newLossMGF(steps, comps, 1<<14)
	lam := m.chernoffLambda(l)
	if !(lam > 0) {
		return vals, errs
	}
	logZ := make([]float64, len(steps))
	K := 0.0 // log of the tilted composition's normalizer
	for k, st := range steps {
		z := math.Inf(-1)
		for i, v := range st.p {
			if v > 0 {
				z = logAddExp(z, math.Log(v)+lam*float64(st.offset+i)*st.step)
			}
		}
		logZ[k] = z
		K += float64(comps[k].count) * z
	}
	step := steps[0].step
	// The tilt moves mass up, past the window when it makes a few
	// participations of a tiny rate likely; mass beyond the window would
	// wrap around onto it. So the tilted composition runs on a window
	// extended up to where the tilted tail is below 1e-16 by Chernoff in
	// the tilted measure, P(L > h) <= e^(K(lam+th) - K(lam) - th h), on the
	// coarse copies rounded so that the bound only loosens; what lies
	// beyond (if MaxBins cuts the window) is counted in the tilted error.
	kLam := m.log(lam, false)
	hiT, loT := math.Inf(1), math.Inf(-1)
	for th := m.lamMin; th < 1e4; th *= 1.4 {
		hiT = math.Min(hiT, (m.log(lam+th, true)-kLam-math.Log(1e-16))/th)
		loT = math.Max(loT, (math.Log(1e-16)-m.log(lam-th, lam-th > 0)+kLam)/th)
	}
	// The tilted window: the plain one, raised at the bottom to where the
	// tilted mass below is negligible and extended at the top, at most
	// MaxBins cells; cells of the plain window outside it keep the plain
	// values.
	bot, top := lower, upper
	if b := math.Floor(loT / step); b > float64(bot) {
		bot = int(math.Min(b, float64(upper)))
	}
	if t := math.Ceil(hiT / step); t > float64(top) {
		top = int(math.Min(t, float64(min(maxIdx, bot+p.opt.MaxBins-1))))
	}
	tv := p.cyclicCompose(steps, comps, bot, top, base, lam, logZ)
	noiseT, peakT := 0.0, 0.0
	for _, v := range tv {
		noiseT = math.Max(noiseT, -v)
		peakT = math.Max(peakT, v)
	}
	noiseT = math.Max(noiseT, float64(total)*0x1p-52*peakT)
	lo, hi := float64(bot)*step, float64(top)*step
	up, dn := 0.0, 0.0
	for th := m.lamMin; th < 1e4; th *= 1.4 {
		up = math.Min(up, m.log(lam+th, true)-kLam-th*hi)
		dn = math.Min(dn, m.log(lam-th, lam-th > 0)-kLam+th*lo)
	}
	ln := math.Log(noiseT + math.Exp(up) + math.Exp(dn))
	for j, v := range tv[:min(len(tv), upper-bot+1)] {
		i := bot - lower + j
		scale := K - lam*float64(bot+j)*step
		if e := math.Exp(ln + scale); e < errs[i] {
			errs[i] = e
			vals[i] = 0
			if v > 0 {
				vals[i] = math.Exp(math.Log(v) + scale)
			}
		}
	}
	return vals, errs
}

// maxBinomialTerms bounds the terms binomial composes.
const maxBinomialTerms = 24

// binomial recomputes d, the remove-direction distribution of T
// compositions of one Poisson-subsampled Gaussian (with at most one
// unsubsampled Gaussian merged in), as the mixture over the number k of
// steps that include the example: the sum over k of Binomial(k; T, q)
// A^(T-k) * B^k, with A and B the step's loss without and with the
// example (discretize's parts). This is the same distribution, but each
// term is composed by FFT on its own Chernoff window, so the rounding
// noise of the likely terms (no participation at all is a spike near
// loss 0 with mass (1-q)^T) stays in their windows instead of swamping the
// rare terms that decide tiny deltas. It returns nil for events of another
// shape and when more than maxBinomialTerms terms carry mass, where the
// distribution is not spiky and refine tilts instead.
func (p *pldAccountant) binomial(d *pmf) *pmf {
	src := d.src
	if src.dir != remove {
		return nil
	}
	sub, gauss := -1, -1
	for k, c := range src.comps {
		switch {
		case c.alloc > 1:
			return nil
		case c.q == 1:
			gauss = k
		case sub >= 0:
			return nil
		default:
			sub = k
		}
	}
	if sub < 0 {
		return nil
	}
	c := src.comps[sub]
	T := c.count
	// Binomial weights by the ratio recurrence from the mode, in logs:
	// exact to a few ulps where lgamma differences of T ~ 1e6 lose 1e-9.
	// The terms kept are those above tau/1000 of weight; beyond them the
	// weights fall geometrically, so the mass left out is at most the
	// last weight times r/(1-r) on each side, r the ratio there.
	lr := math.Log(c.q) - math.Log1p(-c.q)
	ratio := func(k int) float64 { return math.Log(float64(T-k)/float64(k+1)) + lr } // log w_k+1/w_k
	k0 := min(T, int(float64(T+1)*c.q))
	logw := map[int]float64{k0: 0}
	cut := math.Log(p.opt.TailMass * 1e-3)
	klo, khi := k0, k0
	// Weights relative to the mode first; normalized below.
	for khi < T && khi-klo < maxBinomialTerms {
		next := logw[khi] + ratio(khi)
		if next < logw[k0]+cut-10 {
			break
		}
		khi++
		logw[khi] = next
	}
	for klo > 0 && khi-klo < maxBinomialTerms {
		next := logw[klo] - ratio(klo-1)
		if next < logw[k0]+cut-10 {
			break
		}
		klo--
		logw[klo] = next
	}
	terms := khi - klo + 1
	if terms > maxBinomialTerms {
		return nil
	}
	norm := math.Inf(-1)
	for k := klo; k <= khi; k++ {
		norm = logAddExp(norm, logw[k])
	}
	// The normalizer misses the left-out tails, which are below e^-10 of
	// tau/1000 relative to the mode, so it is exact to that.
	left := 0.0
	if khi < T {
		r := math.Exp(ratio(khi))
		left += math.Exp(logw[khi]-norm) * r / (1 - r)
	}
	if klo > 0 {
		r := math.Exp(-ratio(klo - 1))
		left += math.Exp(logw[klo]-norm) * r / (1 - r)
	}
	var parts [2]*pmf
	if _, err := discretize(c, remove, d.step, src.tauStep, p.opt.MaxBins, &parts); err != nil {
		return nil
	}
	lower, upper := d.offset, d.offset+len(d.p)-1
	out := &pmf{offset: d.offset, step: d.step, p: make([]float64, len(d.p)), errs: make([]float64, len(d.p))}
	for k := klo; k <= khi; k++ {
		w := math.Exp(logw[k] - norm)
		var steps []*pmf
		var comps []component
		base := 0
		for j, n := range []int{T - k, k, 1} {
			st := parts[min(j, 1)]
			if j == 2 {
				if gauss < 0 {
					break
				}
				st = src.steps[gauss]
			}
			if n > 0 {
				steps = append(steps, st)
				comps = append(comps, component{count: n})
				base += n * st.offset
			}
		}
		// The term's own window drops at most tau/100 over all terms.
		lo, hi := chernoffWindow(steps, comps, math.Min(0.25, p.opt.TailMass*1e-2/(w*float64(terms))))
		lo, hi = max(lo, lower), min(hi, upper)
		if lo > hi {
			continue
		}
		vals := p.cyclicCompose(steps, comps, lo, hi, base, 0, nil)
		noise, peak, total := 0.0, 0.0, 0
		for _, c := range comps {
			total += c.count
		}
		for _, v := range vals {
			if v > peak {
				peak = v
			}
			if -v > noise {
				noise = -v
			}
		}
		noise = math.Max(noise, float64(total)*0x1p-52*peak)
		for i, v := range vals {
			if v > 0 {
				out.p[lo-lower+i] += w * v
			}
			out.errs[lo-lower+i] += w * noise
		}
	}
	// Infinite loss: what d counted (truncated steps, the window's tails),
	// the terms left out and the terms' own tails.
	out.inf = d.inf + left + 3e-2*p.opt.TailMass
	return out
}

// lossMGF evaluates the moment generating function of a composed loss on
// coarsened copies of the steps' distributions (at most bins cells each),
// with losses rounded down or up.
type lossMGF struct {
	cs     []coarseLoss
	counts []float64
	// lamMin is where lambda scans start: the best lambda is about
	// sqrt(2 log(1/tau) / variance), at least sqrt(72/T)/scale for tails
	// tau >= 1e-16 since the variance is at most T scale^2, with scale the
	// largest loss, which is in the millions for small multipliers. The
	// scan starts ten times lower, and never above 1e-3.
	lamMin float64
}

type coarseLoss struct{ lup, ldn, lp []float64 }

func newLossMGF(steps []*pmf, comps []component, bins int) *lossMGF {
	m := &lossMGF{cs: make([]coarseLoss, len(steps)), counts: make([]float64, len(steps))}
	total, scale := 0.0, 1.0
	for k, d := range steps {
		m.counts[k] = float64(comps[k].count)
		total += m.counts[k]
		scale = math.Max(scale, math.Abs(float64(d.offset)*d.step))
		scale = math.Max(scale, math.Abs(float64(d.offset+len(d.p)-1)*d.step))
		w := (len(d.p) + bins - 1) / bins
		var c coarseLoss
		for j := 0; j < len(d.p); j += w {
			mass := 0.0
			for i := j; i < j+w && i < len(d.p); i++ {
				mass += d.p[i]
			}
			if mass <= 0 {
				continue
			}
			top := min(j+w, len(d.p)) - 1
			c.lp = append(c.lp, math.Log(mass))
			c.ldn = append(c.ldn, float64(d.offset+j)*d.step)
			c.lup = append(c.lup, float64(d.offset+top)*d.step)
		}
		m.cs[k] = c
	}
	m.lamMin = math.Min(1e-3, 0.85/(scale*math.Sqrt(total)))
	return m
}

// log returns log E[e^(lam L)] of the composed loss, with the coarse
// losses rounded up or down.
func (m *lossMGF) log(lam float64, up bool) float64 {
	s := 0.0
	for k, c := range m.cs {
		ls := c.ldn
		if up {
			ls = c.lup
		}
		v := math.Inf(-1)
		for i, lp := range c.lp {
			v = logAddExp(v, lp+lam*ls[i])
		}
		s += m.counts[k] * v
	}
	return s
}

// chernoffWindow returns grid indices [lower, upper] outside which the
// composed distribution has at most tau mass on each side, from Chernoff
// bounds on the moment generating function of the composed loss. The
// bounds are evaluated on coarsened copies whose losses are rounded
// outward, which only loosens them.
func chernoffWindow(steps []*pmf, comps []component, tau float64) (lower, upper int) {
	minIdx, maxIdx := 0, 0
	for k, d := range steps {
		t := comps[k].count
		minIdx += t * d.offset
		maxIdx += t * (d.offset + len(d.p) - 1)
	}
	m := newLossMGF(steps, comps, 1024)
	step := steps[0].step
	lt := math.Log(tau)
	hi, lo := math.Inf(1), math.Inf(-1)
	for lam := m.lamMin; lam < 1e4; lam *= 1.4 {
		hi = math.Min(hi, (m.log(lam, true)-lt)/lam)
		lo = math.Max(lo, (lt-m.log(-lam, false))/lam)
	}
	upper, lower = maxIdx, minIdx
	if u := math.Ceil(hi / step); u < float64(maxIdx) {
		upper = int(u)
	}
	if l := math.Floor(lo / step); l > float64(minIdx) {
		lower = int(l)
	}
	if upper < lower {
		upper = lower
	}
	return lower, upper
}

// chernoffLambda returns the lambda > 0 maximizing lam l - log E[e^(lam L)]
// for the composed loss L, the tilt under which L has mean about l; 0
// when l is not above the mean.
func (m *lossMGF) chernoffLambda(l float64) float64 {
	best, arg := 0.0, 0.0
	for lam := m.lamMin; lam < 1e4; lam *= 1.1 {
		if v := lam*l - m.log(lam, false); v > best {
			best, arg = v, lam
		}
	}
	return arg
}

// fftSize returns the smallest 2^a 3^b 5^c >= n, lengths gonum's FFT
// handles at full speed.
func fftSize(n int) int {
	best := 1
	for best < n {
		best *= 2
	}
	for p3 := 1; p3 < best; p3 *= 3 {
		for p35 := p3; p35 < best; p35 *= 5 {
			m := p35
			for m < n {
				m *= 2
			}
			best = min(best, m)
		}
	}
	return best
}
