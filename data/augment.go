package data

// Augmenter applies the standard CIFAR augmentation: a random crop of the
// zero-padded image (shift by up to Pad pixels each way) and a random
// horizontal flip. The choice for one example depends only on
// (Seed, step, example index), never on call order, so a run resumed from a
// checkpoint at step k augments exactly as the uninterrupted run did.
// The padding value is 0 in whatever space the features are in: after
// Normalize that is the channel mean.
//
// The zero Augmenter copies examples unchanged.
type Augmenter struct {
	Seed uint64
	// Pad is the crop padding (4 for CIFAR); 0 disables cropping.
	Pad int
	// Flip mirrors each example left-right with probability 1/2.
	Flip bool
}

// splitmix64 is a strong 64-bit mixer (Steele, Lea, Flood 2014); chaining it
// over the key gives independent-looking draws per (seed, step, index).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Draw returns the shifts (dy, dx) in [-Pad, Pad] and the flip decision for
// one example.
func (a Augmenter) Draw(step uint64, index int) (dy, dx int, flip bool) {
	h := splitmix64(splitmix64(splitmix64(a.Seed)^step) ^ uint64(index))
	if a.Pad > 0 {
		span := uint64(2*a.Pad + 1)
		// Multiply-shift maps 32 random bits onto [0, span) without a
		// division.
		dy = int(((h&0xffffffff)*span)>>32) - a.Pad
		dx = int(((h>>32&0x7fffffff)*span)>>31) - a.Pad
	}
	if a.Flip {
		flip = h>>63 == 1
	}
	return dy, dx, flip
}

// Apply writes the augmented src (one example of shape) to dst. dst and src
// must not overlap.
func (a Augmenter) Apply(dst, src []float32, shape Shape, step uint64, index int) error {
	s := shape.Size()
	if !shape.valid() || len(src) != s || len(dst) != s {
		return invalidf("augment: len(dst) = %d, len(src) = %d for shape %v", len(dst), len(src), shape)
	}
	if a.Pad < 0 || a.Pad >= shape.H || a.Pad >= shape.W {
		return invalidf("augment: pad %d for %dx%d images", a.Pad, shape.H, shape.W)
	}
	dy, dx, flip := a.Draw(step, index)
	if dy == 0 && dx == 0 && !flip {
		copy(dst, src)
		return nil
	}
	h, w := shape.H, shape.W
	for c := 0; c < shape.C; c++ {
		for r := 0; r < h; r++ {
			out := dst[(c*h+r)*w : (c*h+r+1)*w]
			sr := r + dy
			if sr < 0 || sr >= h {
				clear(out)
				continue
			}
			in := src[(c*h+sr)*w : (c*h+sr+1)*w]
			for col := range out {
				cc := col
				if flip {
					cc = w - 1 - col
				}
				if sc := cc + dx; sc >= 0 && sc < w {
					out[col] = in[sc]
				} else {
					out[col] = 0
				}
			}
		}
	}
	return nil
}

// Batch gathers the examples at indices of d into x and y like
// Dataset.Batch, augmenting each with its dataset index as the example
// index. It does not allocate.
func (a Augmenter) Batch(d *Dataset, indices []int, step uint64, x []float32, y []int) error {
	s := d.Shape.Size()
	if len(x) < len(indices)*s || len(y) < len(indices) {
		return invalidf("augment batch: buffers hold %d features and %d labels, need %d and %d", len(x), len(y), len(indices)*s, len(indices))
	}
	for k, i := range indices {
		if i < 0 || i >= d.Len() {
			return invalidf("augment batch: index %d outside [0, %d)", i, d.Len())
		}
		if err := a.Apply(x[k*s:(k+1)*s], d.X[i*s:(i+1)*s], d.Shape, step, i); err != nil {
			return err
		}
		y[k] = d.Y[i]
	}
	return nil
}
