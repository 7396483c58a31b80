package clip

import (
	"math"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// Accumulator is the clipping rule and its statistics, in one place: it
// turns each unit's gradient (one example's, or one user's at user level)
// into its contribution to a batch's clipped sum, min(1, C/||g||) with a
// relative margin (factor), dropping a unit whose norm is not finite and,
// under Options.LInfZero, one whose L-inf norm is too large, and it counts
// what Stats reports: units clipped, within the norm (the count adaptive
// clipping releases), zeroed and non-finite, the norm quantiles and the
// mean loss. Engine (per example and UserClippedSum) and package
// gorgoniadp compute with it; another engine should too (docs/engines.md),
// so that nobody writes the rule again.
//
// A batch is Begin, one call per unit, then Stats:
//
//   - Add(i, g, loss) for an engine that forms each example's float32
//     gradient g itself: the norms are taken from g, the factor is
//     computed once and g, scaled, is added to the running sum;
//   - Factor(i, nrm, linf) for an engine that takes the norms itself (its
//     executor's, in float64 from exactly the values it will scale), with
//     AddPart to add the unit's scaled gradient, whole or by coordinate
//     ranges, and Losses for the examples' losses. (Engine also clips per
//     layer, and per user, with the same rule.)
//
// Factor may run concurrently for distinct units and AddPart for disjoint
// coordinate ranges; nothing else may.
type Accumulator struct {
	opt Options
	sum []float32 // the running clipped sum, or nil

	// Per unit of the batch.
	norms  []float64 // the unit's norm (NaN: non-finite)
	factor []float64 // the unit's factor (Factor)
	state  []unitState

	examples, finite, memberNonFinite int
	lossSum                           float64
	sorted                            []float64
}

// unitState is what the rule did with a unit.
type unitState uint8

const (
	unitWithin    unitState = iota // kept as is: norm at most the clip norm (every unit under NonPrivate)
	unitClipped                    // scaled down (any layer, per layer)
	unitZeroed                     // dropped by LInfZero
	unitNonFinite                  // dropped: a non-finite input, loss, gradient or norm
)

// NewAccumulator checks opt's rule (Norm, LInfZero, NonPrivate; MaxBatch
// sizes the first batches' per-unit records) and returns its
// accumulator. Under NonPrivate the rule's other fields are ignored: units
// are added as they are, non-finite ones still dropped. Per-layer
// clipping needs each layer's norm from an executor (Engine): it is
// refused.
func NewAccumulator(opt Options) (*Accumulator, error) {
	o, err := opt.rule()
	if err == nil && len(o.PerLayer) > 0 {
		err = dpcore.Invalidf("per-layer clipping needs each layer's norm: only Engine clips per layer")
	}
	if err != nil {
		return nil, dpcore.Invalid("clip", "accumulator: %w", err)
	}
	return newAccumulator(o), nil
}

func newAccumulator(opt Options) *Accumulator {
	a := &Accumulator{opt: opt}
	a.grow(max(opt.MaxBatch, 0))
	return a
}

// rule is opt with what NonPrivate makes moot cleared, or the reason it
// cannot be honoured. (The number of per-layer norms is checked by the
// engine, which knows its layers.)
func (opt Options) rule() (Options, error) {
	opt.PerLayer = slices.Clone(opt.PerLayer)
	if opt.NonPrivate {
		opt.Norm, opt.PerLayer, opt.LInfZero = 0, nil, 0
		return opt, nil
	}
	if len(opt.PerLayer) == 0 && !finitePositive(opt.Norm) {
		return opt, dpcore.Invalidf("clipping norm %v must be positive and finite", opt.Norm)
	}
	if opt.LInfZero < 0 || math.IsNaN(opt.LInfZero) {
		return opt, dpcore.Invalidf("LInfZero %v", opt.LInfZero)
	}
	for _, v := range opt.PerLayer {
		if !finitePositive(v) {
			return opt, dpcore.Invalidf("per-layer norm %v", v)
		}
	}
	return opt, nil
}

func finitePositive(v float64) bool { return v > 0 && !math.IsInf(v, 0) }

// Norm is the flat clip norm of the following units (0 under NonPrivate
// or per-layer clipping).
func (a *Accumulator) Norm() float64 { return a.opt.Norm }

// SetNorm changes the flat clip norm for the following units (adaptive
// clipping). It refuses an accumulator without flat clipping and a norm
// that is not positive and finite.
func (a *Accumulator) SetNorm(norm float64) error {
	if a.opt.NonPrivate || len(a.opt.PerLayer) > 0 {
		return dpcore.Invalid("clip", "set norm: only flat clipping has one norm to set")
	}
	if !finitePositive(norm) {
		return dpcore.Invalid("clip", "set norm: clipping norm %v must be positive and finite", norm)
	}
	a.opt.Norm = norm
	return nil
}

// private reports whether units are clipped (not NonPrivate).
func (a *Accumulator) private() bool { return !a.opt.NonPrivate }

// grow makes room for n units.
func (a *Accumulator) grow(n int) {
	if cap(a.state) < n {
		a.norms = make([]float64, n)
		a.factor = make([]float64, n)
		a.state = make([]unitState, n)
		a.sorted = make([]float64, 0, n)
	}
}

// Begin starts a batch of the given number of units. sum, when not nil,
// is the running clipped sum Add and AddPart add to; it is cleared. An
// engine whose executor adds the scaled gradients itself passes nil.
func (a *Accumulator) Begin(sum []float32, units int) {
	clear(sum)
	a.sum = sum
	a.grow(units)
	a.norms, a.factor, a.state = a.norms[:units], a.factor[:units], a.state[:units]
	clear(a.state)
	a.examples, a.finite, a.memberNonFinite, a.lossSum = 0, 0, 0, 0
}

// Add is one example's whole step, unit i, for an engine that forms the
// example's float32 gradient g (len of the sum) itself and its loss:
// an example whose loss or gradient norm is not finite contributes nothing
// and is counted non-finite; under NonPrivate g is added as it is; else
// its L2 and L-inf norms are taken in float64 from g, and g, scaled by
// the unit's factor, is added to the sum (nothing if LInfZero drops it).
// Its contribution has norm at most the clip norm exactly (factor).
func (a *Accumulator) Add(i int, g []float32, loss float64) {
	a.examples++
	nrm, linf := norms(g, a.opt.LInfZero > 0)
	if !finite(loss) || !finite(nrm) {
		a.drop(i)
		return
	}
	a.finite++
	a.lossSum += loss
	a.Factor(i, nrm, linf)
	a.AddPart(i, 0, g)
}

// Factor applies the flat rule to unit i, whose gradient has L2 norm nrm
// (taken in float64 from exactly the values that will be scaled) and
// L-inf norm linf (read only under LInfZero), records the outcome and
// returns the factor the unit's gradient is to be scaled by (with
// nn.MulDown; AddPart does): 0 when nrm is not finite or LInfZero drops
// the unit, 1 under NonPrivate, else factor(Norm, nrm).
func (a *Accumulator) Factor(i int, nrm, linf float64) float64 {
	if !a.admit(i, nrm, linf) || !a.private() {
		return a.factor[i]
	}
	f := factor(a.opt.Norm, nrm)
	if nrm > a.opt.Norm {
		a.state[i] = unitClipped
	}
	a.factor[i] = f
	return f
}

// admit records unit i's norms and reports whether the rule keeps the
// unit: its norm is finite and LInfZero does not drop it.
func (a *Accumulator) admit(i int, nrm, linf float64) bool {
	if !finite(nrm) {
		a.drop(i)
		return false
	}
	a.norms[i], a.factor[i], a.state[i] = nrm, 1, unitWithin
	if a.private() && a.opt.LInfZero > 0 && !(linf <= a.opt.LInfZero) {
		a.factor[i], a.state[i] = 0, unitZeroed
		return false
	}
	return true
}

// scale is Factor for the executor of package nn, which clips by layer
// (Engine's nn.Clipper): it receives unit i's squared gradient norm per
// layer sq (all NaN for a non-finite unit) and writes one factor per
// layer into f. The unit's norm is the L2 norm over all layers; under
// Options.PerLayer each layer has its own factor and the unit counts as
// clipped if any layer is. It may run concurrently for distinct units.
func (a *Accumulator) scale(i int, sq []float64, linf float64, f []float64) {
	tot := 0.0
	for _, v := range sq {
		tot += v
	}
	nrm := math.Sqrt(tot)
	if len(a.opt.PerLayer) == 0 {
		k := a.Factor(i, nrm, linf)
		for l := range f {
			f[l] = k
		}
		return
	}
	if !a.admit(i, nrm, linf) {
		clear(f)
		return
	}
	for l, v := range sq {
		ln := math.Sqrt(v)
		f[l] = factor(a.opt.PerLayer[l], ln)
		if ln > a.opt.PerLayer[l] {
			a.state[i] = unitClipped
		}
	}
}

// AddPart adds unit i's gradient entries g, scaled by its factor
// (Factor), to the sum's entries from lo on: the whole gradient (lo = 0)
// or one of the coordinate ranges concurrent workers split it into.
// Under NonPrivate g is added as it is.
func (a *Accumulator) AddPart(i, lo int, g []float32) {
	dst := a.sum[lo : lo+len(g)]
	if !a.private() {
		if a.factor[i] != 0 {
			for j, v := range g {
				dst[j] += v
			}
		}
		return
	}
	addScaled(dst, g, a.factor[i])
}

// drop records unit i as non-finite.
func (a *Accumulator) drop(i int) {
	a.norms[i], a.factor[i], a.state[i] = math.NaN(), 0, unitNonFinite
}

// Losses records the losses of the examples that are units i0, i0+1, ...
// (per-example clipping): a non-finite loss (the executor's mark of a
// non-finite input, loss or gradient) drops its unit, the others enter
// the mean loss. A dropped unit adds nothing to the sum from then on
// (AddPart).
func (a *Accumulator) Losses(i0 int, losses []float64) {
	for k, l := range losses {
		a.examples++
		if !finite(l) {
			a.drop(i0 + k)
			continue
		}
		a.finite++
		a.lossSum += l
	}
}

// memberLosses records the losses of examples inside units (a user's
// examples, or an example's augmented copies): a non-finite one is
// counted non-finite (the caller leaves it out of its unit, whose other
// examples still count), the others enter the mean loss.
func (a *Accumulator) memberLosses(losses []float64) {
	for _, l := range losses {
		a.examples++
		if !finite(l) {
			a.memberNonFinite++
			continue
		}
		a.finite++
		a.lossSum += l
	}
}

// Stats are the batch's statistics: Examples counts the examples whose
// losses were recorded; Clipped is the fraction of units scaled down;
// NonFinite counts the units dropped as non-finite and the non-finite
// examples inside units; WithinNorm counts the kept units at most the
// flat clip norm; NormQuantiles are over the finite units' norms
// (zero under NonPrivate).
func (a *Accumulator) Stats() Stats {
	var st Stats
	st.Examples = a.examples
	clipped := 0
	flat := a.private() && len(a.opt.PerLayer) == 0
	a.sorted = a.sorted[:0]
	for i, s := range a.state {
		switch s {
		case unitNonFinite:
			st.NonFinite++
			continue
		case unitZeroed:
			st.Zeroed++
		case unitClipped:
			clipped++
		case unitWithin:
			if flat {
				st.WithinNorm++
			}
		}
		if a.private() {
			a.sorted = append(a.sorted, a.norms[i])
		}
	}
	st.NonFinite += a.memberNonFinite
	if len(a.state) > 0 {
		st.Clipped = float64(clipped) / float64(len(a.state))
	}
	if a.finite > 0 {
		st.Loss = a.lossSum / float64(a.finite)
	}
	st.NormQuantiles = quantiles(a.sorted)
	return st
}

// margin is the relative margin of factor's threshold: 2^-20, which
// covers the float64 rounding of a norm of up to 2^32 terms and of the
// factor itself (a few 2^-53 each) with room to spare.
const margin = 1.0 / (1 << 20)

// factor is the number by which a unit's gradient (one example's, one
// layer's, one user's) is multiplied before it enters a clipped sum under
// clip norm c (finite, > 0), given nrm, the gradient's L2 norm computed in
// float64 from exactly the values that are scaled: 0 when nrm is not
// finite (the unit is dropped and counted as non-finite), 1 when nrm <=
// c(1-2^-20), else c/nrm*(1-2^-20), in (0, 1). It depends on nothing
// but its two arguments.
//
// Bound. Let g have n <= 2^32 entries, exact norm ||g||. The float64 sum
// of squares is within n*2^-53 relative of ||g||^2, so ||g|| <= nrm(1 +
// (n+2)2^-53). Unscaled (f = 1), ||g|| <= c(1-2^-20)(1 + (n+3)2^-53) <= c.
// Scaled with nn.MulDown (addScaled; the executor of package nn does the
// same), each entry is the float32 factor Factor32(f) <= f(1+2^-24) (0
// when f is below the float32 normal range) times g_k, rounded to nearest
// (within 2^-24 relative) or flushed to zero when the product is
// subnormal, so the contribution v has ||v|| <= f||g||(1+2^-24)^2 <=
// c(1-2^-20)(1+2^-24)^2(1+(n+5)2^-53) <= c. A float64 gradient (a user's
// sum, whose norm is taken in float64) is first rounded toward zero to
// float32 (nn.TowardZero32, clamping at the float32 maximum), which only
// shrinks each entry, then scaled the same way: the same bound. A dense
// layer's contribution is the outer product of its input u and its scaled
// output gradient v (and v for the bias), whose norm is
// sqrt(||u||^2+1)||v||: the same bound, with nrm^2 computed as
// (||u||^2+1)||g||^2. No rounding, not even one into the subnormal range,
// can lift a contribution above c.
func factor(c, nrm float64) float64 {
	if !finite(nrm) {
		return 0
	}
	if nrm <= c*(1-margin) {
		return 1
	}
	return c / nrm * (1 - margin)
}

// addScaled adds f*g to dst entry by entry (len(dst) = len(g)) with
// nn.MulDown (the factor as nn.Factor32, each product rounded to nearest,
// subnormal factors and products flushed to zero), so that the vector
// added has norm at most f||g||(1+2^-24)^2, which factor's margin covers.
// f = 1 adds g with the same work as any other factor (clipped or not, a
// unit costs the same); f = 0 adds nothing.
func addScaled(dst, g []float32, f float64) {
	if f == 0 {
		return
	}
	f32 := nn.Factor32(f)
	for j, v := range g {
		dst[j] += nn.MulDown(f32, v)
	}
}

// norms is g's L2 norm and, when linf is set, its L-inf norm, in
// float64.
func norms(g []float32, linf bool) (l2, li float64) {
	sq := 0.0
	for _, v := range g {
		f := float64(v)
		sq += f * f
	}
	if linf {
		for _, v := range g {
			li = max(li, math.Abs(float64(v)))
		}
	}
	return math.Sqrt(sq), li
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// quantiles sorts v and returns its 50%, 90%, 99% quantiles and maximum.
func quantiles(v []float64) [4]float64 {
	var q4 [4]float64
	slices.Sort(v)
	if k := len(v); k > 0 {
		for j, q := range []float64{0.5, 0.9, 0.99} {
			q4[j] = v[min(k-1, int(math.Ceil(q*float64(k)))-1)]
		}
		q4[3] = v[k-1]
	}
	return q4
}
