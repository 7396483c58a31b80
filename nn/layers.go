package nn

import (
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
)

// AvgPool is a Size x Size average pooling with stride Size; rows and
// columns that do not fill a window are dropped (floor).
type AvgPool struct{ Size int }

// GroupNorm normalizes each example's channels in Groups groups over
// (channels of the group, height, width), then applies the learnable
// per-channel affine y = Weight[c] xhat + Bias[c] (Wu and He 2018). It
// depends on one example only, so per-example gradients and clipping are
// exact; De et al. (2022) use it in place of BatchNorm for private
// training. Eps is added to the variance (0 means 1e-5, PyTorch's
// default).
type GroupNorm struct {
	Groups       int
	Eps          float64
	Act          Activation // applied after the affine
	Weight, Bias Param      // C entries each
}

// LayerNorm normalizes each example over all its C*H*W features and
// applies an element-wise learnable affine (Weight and Bias have C*H*W
// entries in CHW order), as PyTorch's LayerNorm over the whole example.
type LayerNorm struct {
	Eps          float64
	Act          Activation // applied after the affine
	Weight, Bias Param
}

// BatchNorm is refused: it normalizes with statistics of the whole batch,
// so one example's gradient depends on every other example and clipping
// it bounds nothing. Use GroupNorm.
type BatchNorm struct{}

// ErrBatchNorm is returned (wrapped) for a network with a BatchNorm layer.
var ErrBatchNorm = errors.New("BatchNorm mixes the examples of a batch, so per-example gradients and their clipping bound nothing; use GroupNorm (or LayerNorm) instead")

func (BatchNorm) out(Shape) (Shape, error) {
	return Shape{}, dpcore.Invalidf("%w", ErrBatchNorm)
}

func (p AvgPool) out(in Shape) (Shape, error) {
	if p.Size <= 0 || in.H < p.Size || in.W < p.Size {
		return Shape{}, dpcore.Invalidf("average pool %d on a %dx%d input", p.Size, in.H, in.W)
	}
	return Shape{in.C, in.H / p.Size, in.W / p.Size}, nil
}

func (g GroupNorm) out(in Shape) (Shape, error) {
	if g.Act > GELU {
		return Shape{}, dpcore.Invalidf("group norm: %v", g.Act)
	}
	if g.Groups <= 0 || in.C%g.Groups != 0 {
		return Shape{}, dpcore.Invalidf("group norm: %d groups do not divide %d channels", g.Groups, in.C)
	}
	if g.Eps < 0 || g.Eps != g.Eps {
		return Shape{}, dpcore.Invalidf("group norm: eps %v", g.Eps)
	}
	if g.Weight.Len != in.C || g.Bias.Len != in.C {
		return Shape{}, dpcore.Invalidf("group norm: weight %+v, bias %+v for %d channels", g.Weight, g.Bias, in.C)
	}
	return in, nil
}

func (l LayerNorm) out(in Shape) (Shape, error) {
	if l.Act > GELU {
		return Shape{}, dpcore.Invalidf("layer norm: %v", l.Act)
	}
	if l.Eps < 0 || l.Eps != l.Eps {
		return Shape{}, dpcore.Invalidf("layer norm: eps %v", l.Eps)
	}
	if l.Weight.Len != in.Size() || l.Bias.Len != in.Size() {
		return Shape{}, dpcore.Invalidf("layer norm: weight %+v, bias %+v for %d features", l.Weight, l.Bias, in.Size())
	}
	return in, nil
}

// Residual is a residual block (He et al. 2016): its output is
// Body(x) + Shortcut(x), with the identity when Shortcut is empty (then
// Body must keep the shape). Blocks nest.
type Residual struct {
	Body, Shortcut []Layer
}

func (r Residual) out(in Shape) (Shape, error) {
	if len(r.Body) == 0 {
		return Shape{}, dpcore.Invalidf("residual block with an empty body")
	}
	chain := func(ls []Layer, what string) (Shape, error) {
		cur := in
		for i, l := range ls {
			if l == nil {
				return Shape{}, dpcore.Invalidf("residual %s layer %d is nil", what, i)
			}
			next, err := l.out(cur)
			if err != nil {
				return Shape{}, fmt.Errorf("residual %s layer %d: %w", what, i, err)
			}
			cur = next
		}
		return cur, nil
	}
	b, err := chain(r.Body, "body")
	if err != nil {
		return Shape{}, err
	}
	s, err := chain(r.Shortcut, "shortcut")
	if err != nil {
		return Shape{}, err
	}
	if b != s {
		return Shape{}, dpcore.Invalidf("residual body gives %dx%dx%d, shortcut %dx%dx%d", b.C, b.H, b.W, s.C, s.H, s.W)
	}
	return b, nil
}

// Dropout zeroes each activation with probability Rate during training
// steps and scales the others by 1/(1-Rate) (inverted dropout);
// evaluation (Plan.Forward) passes activations through. The mask is a
// deterministic function of Seed, the plan's step counter, the example's
// position in the batch, the layer and the element, so a run is
// reproducible and resumable (Plan.SetStepCount) and each example's
// gradient depends on its own mask only.
type Dropout struct {
	Rate float64
	Seed uint64
}

func (d Dropout) out(in Shape) (Shape, error) {
	if !(d.Rate >= 0 && d.Rate < 1) {
		return Shape{}, dpcore.Invalidf("dropout rate %v not in [0, 1)", d.Rate)
	}
	return in, nil
}

// dropKeep reports whether element k of example i at step t is kept by
// the dropout layer at stage s: a splitmix64 hash of (seed, t, i, s, k)
// compared with the rate.
func dropKeep(seed, t uint64, i, s, k int, threshold uint64) bool {
	x := seed ^ 0x9e3779b97f4a7c15*(t+1)
	x ^= uint64(i)*0xbf58476d1ce4e5b9 + uint64(s)*0x94d049bb133111eb + uint64(k)
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return x >= threshold
}
