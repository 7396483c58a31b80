package clip

import (
	"math"
	"runtime"
	"sync"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// captureBytes bounds the per-example gradients UserClippedSum holds at
// once.
const captureBytes = 64 << 20

// UserOptions says how UserClippedSum combines one user's examples.
type UserOptions struct {
	// Mean clips the mean of the user's per-example gradients instead of
	// their sum.
	Mean bool
}

// UserClippedSum is ClippedSum at user level: the examples x (labels y)
// are consecutive runs of one user each, groups[k] examples for user k
// (sum of groups = len(y)), and dst receives the sum over users of
// clip(g_k), where g_k is the exact sum (or mean, opt.Mean) of user k's
// per-example gradients and clip scales it to L2 norm at most Norm. One
// user's whole data thus moves dst by at most Norm, however many examples
// the user has.
//
// The per-example gradients come from the same single forward and backward
// pass as ClippedSum (nn.Plan.Gradients, in chunks of whole users that hold
// at least 64 MiB of gradients, more when one user needs it). A user's
// gradient g is combined and its norm taken in float64 before anything is
// rounded: each coordinate is added (and averaged) in float64, the norm is
// taken in float64 from exactly those float64 values, and the coordinates
// are then rounded toward zero to float32 (nn.TowardZero32, which clamps
// a coordinate beyond the float32 range to the largest float32), so the
// stored w has |w_k| <= |g_k|, and the contribution is w scaled by the
// user's factor (Accumulator.Factor, Accumulator.AddPart) with nn.MulDown:
// its norm is at most the factor times ||g|| (1+2^-24)^2 <= Norm in the
// float arithmetic done, however large the examples' gradients. Rows near the float32 maximum (a CSV missing-value
// sentinel) can no longer overflow a user's sum to Inf, and no user can
// make the sum NaN.
// The combination runs on GOMAXPROCS goroutines over coordinate ranges. A
// non-finite example contributes nothing (its user's other examples still
// do) and is counted in Stats.NonFinite. Stats count users: Clipped is the
// fraction of users clipped and NormQuantiles are over users' unclipped
// gradient norms; Loss is the mean over finite examples. Only flat
// clipping (Options.Norm) is supported.
func (e *Engine) UserClippedSum(x []float32, y []int, groups []int, opt UserOptions, dst []float32) (Stats, error) {
	var st Stats
	d := e.m.NumParams()
	largest, err := e.checkUserBatch(x, y, groups, dst)
	if err != nil {
		return st, err
	}
	chunk := max(largest, min(len(y), captureBytes/(4*d)))
	e.ensureUserCapture(chunk, d)
	e.acc.Begin(dst, len(groups))
	workers := max(1, min(runtime.GOMAXPROCS(0), d/4096))
	for lo, g0 := 0, 0; g0 < len(groups); {
		hi, g1 := userChunk(groups, lo, g0, chunk)
		out := e.capture[:hi-lo]
		losses, err := e.plan.Gradients(x[lo*e.chw:hi*e.chw], y[lo:hi], out)
		if err != nil {
			return st, err
		}
		ok := e.finiteExamples(losses)
		users := groups[g0:g1]
		sq := e.combineUsers(out, ok, users, workers, opt.Mean)
		e.userFactors(g0, users, sq, workers)
		e.addClippedUsers(g0, out, users, workers)
		lo, g0 = hi, g1
	}
	return e.acc.Stats(), nil
}

// checkUserBatch refuses what UserClippedSum cannot do and returns the
// largest user's example count.
func (e *Engine) checkUserBatch(x []float32, y []int, groups []int, dst []float32) (largest int, err error) {
	d := e.m.NumParams()
	switch {
	case e.opt.NonPrivate || len(e.opt.PerLayer) > 0 || e.opt.LInfZero > 0:
		return 0, dpcore.Invalid("clip", "user clipped sum: only flat clipping (Options.Norm) is supported")
	case len(dst) != d:
		return 0, dpcore.Invalid("clip", "user clipped sum: len(dst) = %d, want %d", len(dst), d)
	case len(y) == 0 || len(y) > e.opt.MaxBatch:
		return 0, dpcore.Invalid("clip", "user clipped sum: batch of %d not in [1, MaxBatch=%d]", len(y), e.opt.MaxBatch)
	case len(x) != len(y)*e.chw:
		return 0, dpcore.Invalid("clip", "user clipped sum: %d floats for %d examples of %d", len(x), len(y), e.chw)
	}
	tot := 0
	for k, g := range groups {
		if g <= 0 {
			return 0, dpcore.Invalid("clip", "user clipped sum: user %d has %d examples", k, g)
		}
		tot += g
		largest = max(largest, g)
	}
	if tot != len(y) {
		return 0, dpcore.Invalid("clip", "user clipped sum: groups hold %d examples, the batch %d", tot, len(y))
	}
	if need := int64(largest) * int64(d) * 4; need > maxUserCapture {
		return 0, dpcore.Invalid("clip", "user clipped sum: a user of %d examples needs %d MiB of per-example gradients (limit %d MiB): bound the examples per user", largest, need>>20, maxUserCapture>>20)
	}
	if err := e.checkParams(); err != nil {
		return 0, err
	}
	return largest, nil
}

// ensureUserCapture sizes the per-example gradient buffers for chunk
// examples of d parameters (kept across calls).
func (e *Engine) ensureUserCapture(chunk, d int) {
	if len(e.capture) < chunk || len(e.capture[0]) != d {
		e.capture = make([][]float32, chunk)
		for i := range e.capture {
			e.capture[i] = make([]float32, d)
		}
		e.userAcc = make([]float64, d)
	}
}

// userChunk is the chunk starting at example lo, user g0: whole users, at
// most chunk examples. It ends before example hi, user g1.
func userChunk(groups []int, lo, g0, chunk int) (hi, g1 int) {
	hi, g1 = lo, g0
	for g1 < len(groups) && hi+groups[g1]-lo <= chunk {
		hi += groups[g1]
		g1++
	}
	return hi, g1
}

// finiteExamples marks the chunk's examples to keep and records their
// losses. A non-finite loss marks an example whose input, loss or
// gradient norm is not finite (nn.Plan.Step): it is left out of its
// user's gradient and counted.
func (e *Engine) finiteExamples(losses []float64) []bool {
	ok := e.userOK[:0]
	for _, l := range losses {
		ok = append(ok, finite(l))
	}
	e.userOK = ok
	e.acc.memberLosses(losses)
	return ok
}

// combineUsers is pass 1: each user's gradient, coordinate by coordinate
// in float64, rounded toward zero into its first example's slot of out; it
// returns the partial squared norms of the float64 gradients,
// sq[u*workers+w] for user u on worker w's coordinates.
func (e *Engine) combineUsers(out [][]float32, ok []bool, users []int, workers int, mean bool) []float64 {
	if cap(e.userSq) < len(users)*workers {
		e.userSq = make([]float64, len(users)*workers)
	}
	sq := e.userSq[:len(users)*workers]
	clear(sq)
	acc := e.userAcc
	parallelRanges(len(acc), workers, func(w, a, b int) {
		first := 0
		sum := acc[a:b]
		for u, g := range users {
			clear(sum)
			for j := first; j < first+g; j++ {
				if !ok[j] {
					continue
				}
				for i, v := range out[j][a:b] {
					sum[i] += float64(v)
				}
			}
			scale := 1.0
			if mean {
				scale = 1 / float64(g)
			}
			dstv := out[first][a:b]
			s := 0.0
			for i, a := range sum {
				v := a * scale
				dstv[i] = nn.TowardZero32(v)
				s += v * v
			}
			sq[u*workers+w] = s
			first += g
		}
	})
	return sq
}

// userFactors turns the partial squared norms into each user's clip
// factor (Accumulator.Factor: users are units g0... of the batch). A user
// whose norm is not finite (which float64 sums of finite float32
// gradients cannot produce) gets factor 0 and is counted non-finite.
func (e *Engine) userFactors(g0 int, users []int, sq []float64, workers int) {
	for u := range users {
		s := 0.0
		for w := range workers {
			s += sq[u*workers+w]
		}
		e.acc.Factor(g0+u, math.Sqrt(s), 0)
	}
}

// addClippedUsers is pass 2: add the clipped users' gradients (each in its
// first example's slot of out) to the sum, by coordinate ranges.
func (e *Engine) addClippedUsers(g0 int, out [][]float32, users []int, workers int) {
	parallelRanges(e.m.NumParams(), workers, func(_, a, b int) {
		first := 0
		for u, g := range users {
			e.acc.AddPart(g0+u, a, out[first][a:b])
			first += g
		}
	})
}

// maxUserCapture bounds the per-example gradients one user may need at
// once (1 GiB).
const maxUserCapture = 1 << 30

// MaxUserExamples is the most examples one user (or one example's
// augmented copies) may have in a UserClippedSum call: their per-example
// gradients must fit in 1 GiB. A training loop refuses a larger bound
// before the first step, so that no step fails on the user it sampled.
func (e *Engine) MaxUserExamples() int {
	return maxUserCapture / (4 * e.m.NumParams())
}

// parallelRanges splits [0, n) into workers contiguous ranges and runs
// f(worker, lo, hi) on each concurrently.
func parallelRanges(n, workers int, f func(w, lo, hi int)) {
	if workers == 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(w, lo, hi)
		}()
	}
	wg.Wait()
}
