package clip

import (
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
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
// pass as ClippedSum (nn.Plan.Gradients, in chunks that hold at most 64
// MiB of gradients); they are added per user in float64, the user's
// gradient is rounded once to float32, its norm is taken in float64 from
// exactly those float32 values, and the clip factor carries ClippedSum's
// margin, so each user's contribution has norm at most Norm in the float
// arithmetic done. A non-finite example contributes nothing (its user's
// other examples still do) and is counted in Stats.NonFinite. Stats count
// users: Clipped is the fraction of users clipped and NormQuantiles are
// over users' unclipped gradient norms; Loss is the mean over finite
// examples. Only flat clipping (Options.Norm) is supported.
func (e *Engine) UserClippedSum(x []float32, y []int, groups []int, opt UserOptions, dst []float32) (Stats, error) {
	var st Stats
	d := e.m.NumParams()
	switch {
	case e.opt.NonPrivate || len(e.opt.PerLayer) > 0 || e.opt.LInfZero > 0:
		return st, dpcore.Invalidf("clip: user clipped sum: only flat clipping (Options.Norm) is supported")
	case len(dst) != d:
		return st, dpcore.Invalidf("clip: user clipped sum: len(dst) = %d, want %d", len(dst), d)
	case len(y) == 0 || len(y) > e.opt.MaxBatch:
		return st, dpcore.Invalidf("clip: user clipped sum: batch of %d not in [1, MaxBatch=%d]", len(y), e.opt.MaxBatch)
	case len(x) != len(y)*e.chw:
		return st, dpcore.Invalidf("clip: user clipped sum: %d floats for %d examples of %d", len(x), len(y), e.chw)
	}
	tot := 0
	for k, g := range groups {
		if g <= 0 {
			return st, dpcore.Invalidf("clip: user clipped sum: user %d has %d examples", k, g)
		}
		tot += g
	}
	if tot != len(y) {
		return st, dpcore.Invalidf("clip: user clipped sum: groups hold %d examples, the batch %d", tot, len(y))
	}
	if err := e.checkParams(); err != nil {
		return st, err
	}
	chunk := max(1, min(len(y), captureBytes/(4*d)))
	if len(e.capture) < chunk || len(e.capture[0]) != d {
		e.capture = make([][]float32, chunk)
		for i := range e.capture {
			e.capture[i] = make([]float32, d)
		}
		e.userAcc = make([]float64, d)
		e.userVec = make([]float32, d)
	}
	clear(dst)
	acc, vec := e.userAcc, e.userVec
	clear(acc)
	st.Examples = len(y)
	e.sorted = e.sorted[:0]
	user, left := 0, groups[0]
	finite, clipped, lossSum := 0, 0, 0.0
	for lo := 0; lo < len(y); lo += chunk {
		hi := min(lo+chunk, len(y))
		out := e.capture[:hi-lo]
		losses, err := e.plan.Gradients(x[lo*e.chw:hi*e.chw], y[lo:hi], out)
		if err != nil {
			return st, err
		}
		for j, l := range losses {
			g := out[j]
			if !math.IsNaN(l) && allFinite(g) {
				finite++
				lossSum += l
				for i, v := range g {
					acc[i] += float64(v)
				}
			} else {
				st.NonFinite++
			}
			if left--; left > 0 {
				continue
			}
			// The user's last example: clip and add its gradient.
			scale := 1.0
			if opt.Mean {
				scale = 1 / float64(groups[user])
			}
			sq := 0.0
			for i, a := range acc {
				vec[i] = float32(a * scale)
				sq += float64(vec[i]) * float64(vec[i])
			}
			nrm := math.Sqrt(sq)
			f := float32(1)
			if nrm > e.opt.Norm {
				f = float32(e.opt.Norm / nrm * shrink)
				clipped++
			}
			e.sorted = append(e.sorted, nrm)
			for i, v := range vec {
				dst[i] += f * v
			}
			clear(acc)
			if user++; user < len(groups) {
				left = groups[user]
			}
		}
	}
	st.Clipped = float64(clipped) / float64(len(groups))
	if finite > 0 {
		st.Loss = lossSum / float64(finite)
	}
	st.NormQuantiles = quantiles(e.sorted)
	return st, nil
}

func allFinite(v []float32) bool {
	for _, x := range v {
		if x-x != 0 {
			return false
		}
	}
	return true
}
