package data

import (
	"errors"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// ErrFormat is wrapped by every error caused by a malformed file: wrong
// magic, truncated or oversized data, labels out of range.
var ErrFormat = errors.New("malformed dataset file")

func invalidf(format string, args ...any) error {
	return dpcore.Invalid("data", format, args...)
}

func formatf(format string, args ...any) error {
	return fmt.Errorf("data: %w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// Shape is the shape of one example: channels, height, width.
type Shape struct {
	C, H, W int
}

// Size is C*H*W, the number of features of one example.
func (s Shape) Size() int { return s.C * s.H * s.W }

func (s Shape) String() string { return fmt.Sprintf("%dx%dx%d", s.C, s.H, s.W) }

func (s Shape) valid() bool {
	const max = 1 << 20
	return s.C > 0 && s.H > 0 && s.W > 0 && s.C <= max && s.H <= max && s.W <= max && s.C*s.H <= max && s.Size() <= 1<<30
}

// Dataset is an in-memory labelled dataset. Example i occupies
// X[i*Shape.Size() : (i+1)*Shape.Size()] in CHW order (channel-major, then
// rows, then columns); its label is Y[i] in [0, Classes).
type Dataset struct {
	// Name says where the data came from, e.g. "fashion-mnist/train".
	Name    string
	X       []float32
	Y       []int
	Shape   Shape
	Classes int
	// Coarse holds CIFAR-100's 20 superclass labels (nil otherwise); Y holds
	// the 100 fine labels.
	Coarse        []int
	CoarseClasses int
	// Owners, when not nil, holds the owner (user) id of every example,
	// for user-level privacy: all examples with the same id are one
	// user's (SetOwners, Users).
	Owners []int64

	// parent and offset: a view made by Slice shares parent's slices
	// from example offset on (parent nil: not a view).
	parent *Dataset
	offset int
}

// NewDataset wraps x (len(y) examples of shape in CHW order) and labels y
// in [0, classes). It keeps the slices, it does not copy them. Non-finite
// features and out-of-range labels are errors.
func NewDataset(x []float32, y []int, shape Shape, classes int) (*Dataset, error) {
	if !shape.valid() {
		return nil, invalidf("new dataset: shape %v", shape)
	}
	if classes <= 0 {
		return nil, invalidf("new dataset: %d classes", classes)
	}
	if len(x) != len(y)*shape.Size() {
		return nil, invalidf("new dataset: len(x) = %d, want %d examples x %d features = %d", len(x), len(y), shape.Size(), len(y)*shape.Size())
	}
	for i, v := range x {
		if v-v != 0 {
			return nil, invalidf("new dataset: feature %d of example %d is %v", i%shape.Size(), i/shape.Size(), v)
		}
	}
	for i, l := range y {
		if l < 0 || l >= classes {
			return nil, invalidf("new dataset: label %d of example %d outside [0, %d)", l, i, classes)
		}
	}
	return &Dataset{X: x, Y: y, Shape: shape, Classes: classes}, nil
}

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.Y) }

// Example returns example i's features (a view into X, not a copy).
func (d *Dataset) Example(i int) []float32 {
	s := d.Shape.Size()
	return d.X[i*s : (i+1)*s : (i+1)*s]
}

// Batch copies the examples at indices into x (at least
// len(indices)*Shape.Size() long) and their labels into y (at least
// len(indices) long). It does not allocate.
func (d *Dataset) Batch(indices []int, x []float32, y []int) error {
	s := d.Shape.Size()
	if len(x) < len(indices)*s || len(y) < len(indices) {
		return invalidf("batch: buffers hold %d features and %d labels, need %d and %d", len(x), len(y), len(indices)*s, len(indices))
	}
	for k, i := range indices {
		if i < 0 || i >= len(d.Y) {
			return invalidf("batch: index %d outside [0, %d)", i, len(d.Y))
		}
		copy(x[k*s:(k+1)*s], d.X[i*s:(i+1)*s])
		y[k] = d.Y[i]
	}
	return nil
}

// ClassCounts returns how many examples each class has.
//
// Not private: the counts are exact functions of the labels, not covered
// by any privacy guarantee (adding or removing one example changes one of
// them by one). Do not publish those of a private training set.
func (d *Dataset) ClassCounts() []int {
	c := make([]int, d.Classes)
	for _, l := range d.Y {
		c[l]++
	}
	return c
}

// Slice returns examples [lo, hi) as a view: the new Dataset shares d's
// slices (X, Y, Coarse, Owners), it copies nothing, so writes through
// either are seen by both. Parent says what it is a view of.
func (d *Dataset) Slice(lo, hi int) (*Dataset, error) {
	if lo < 0 || hi < lo || hi > d.Len() {
		return nil, invalidf("slice [%d, %d) of %d examples", lo, hi, d.Len())
	}
	s := d.Shape.Size()
	out := *d
	out.X = d.X[lo*s : hi*s : hi*s]
	out.Y = d.Y[lo:hi:hi]
	if d.Coarse != nil {
		out.Coarse = d.Coarse[lo:hi:hi]
	}
	if d.Owners != nil {
		out.Owners = d.Owners[lo:hi:hi]
	}
	out.parent, out.offset = d, lo
	if d.parent != nil {
		out.parent, out.offset = d.parent, d.offset+lo
	}
	return &out, nil
}

// Parent is the Dataset d is a view of (Slice) and the index in it of d's
// first example; (d, 0) when d is not a view.
func (d *Dataset) Parent() (*Dataset, int) {
	if d.parent == nil {
		return d, 0
	}
	return d.parent, d.offset
}

// Subset returns a new Dataset holding copies of the examples at indices.
func (d *Dataset) Subset(indices []int) (*Dataset, error) {
	s := d.Shape.Size()
	out := &Dataset{
		Name: d.Name, X: make([]float32, len(indices)*s), Y: make([]int, len(indices)),
		Shape: d.Shape, Classes: d.Classes, CoarseClasses: d.CoarseClasses,
	}
	if err := d.Batch(indices, out.X, out.Y); err != nil {
		return nil, fmt.Errorf("data: subset: %w", err)
	}
	if d.Coarse != nil {
		out.Coarse = make([]int, len(indices))
		for k, i := range indices {
			out.Coarse[k] = d.Coarse[i]
		}
	}
	if d.Owners != nil {
		out.Owners = make([]int64, len(indices))
		for k, i := range indices {
			out.Owners[k] = d.Owners[i]
		}
	}
	return out, nil
}

// ChannelStats returns the per-channel mean and (population) standard
// deviation of the features, accumulated in float64.
//
// Not private: the result is an exact function of every example in d,
// not covered by any privacy guarantee (a mean moves with each example,
// and anyone who knows the others can read the last one off it). Do not
// compute it on a private training set for a private run, nor publish it:
// use fixed published constants (MNIST's mean 0.1307 and std 0.3081, for
// example) or statistics of public data, and pass them to Normalize.
func (d *Dataset) ChannelStats() (mean, std []float64, err error) {
	if d.Len() == 0 {
		return nil, nil, invalidf("channel stats: empty dataset")
	}
	c, hw := d.Shape.C, d.Shape.H*d.Shape.W
	mean = make([]float64, c)
	std = make([]float64, c)
	s := d.Shape.Size()
	// Two passes (mean, then squared deviations) avoid the cancellation of
	// E[x^2] - E[x]^2.
	for i := 0; i < d.Len(); i++ {
		ex := d.X[i*s : (i+1)*s]
		for ch := 0; ch < c; ch++ {
			var acc float64
			for _, v := range ex[ch*hw : (ch+1)*hw] {
				acc += float64(v)
			}
			mean[ch] += acc
		}
	}
	cnt := float64(d.Len() * hw)
	for ch := range mean {
		mean[ch] /= cnt
	}
	for i := 0; i < d.Len(); i++ {
		ex := d.X[i*s : (i+1)*s]
		for ch := 0; ch < c; ch++ {
			var acc float64
			m := mean[ch]
			for _, v := range ex[ch*hw : (ch+1)*hw] {
				dv := float64(v) - m
				acc += dv * dv
			}
			std[ch] += acc
		}
	}
	for ch := range std {
		std[ch] = math.Sqrt(std[ch] / cnt)
	}
	return mean, std, nil
}

// Normalize maps every feature of channel c to (x - mean[c]) / std[c] in
// place.
func (d *Dataset) Normalize(mean, std []float64) error {
	c, hw := d.Shape.C, d.Shape.H*d.Shape.W
	if len(mean) != c || len(std) != c {
		return invalidf("normalize: %d means and %d stds for %d channels", len(mean), len(std), c)
	}
	for ch := 0; ch < c; ch++ {
		if !(std[ch] > 0) || math.IsInf(std[ch], 0) || math.IsNaN(mean[ch]) || math.IsInf(mean[ch], 0) {
			return invalidf("normalize: channel %d mean %v std %v", ch, mean[ch], std[ch])
		}
	}
	s := d.Shape.Size()
	for i := 0; i < d.Len(); i++ {
		ex := d.X[i*s : (i+1)*s]
		for ch := 0; ch < c; ch++ {
			m, inv := float32(mean[ch]), float32(1/std[ch])
			seg := ex[ch*hw : (ch+1)*hw]
			for k, v := range seg {
				seg[k] = (v - m) * inv
			}
		}
	}
	return nil
}

// NormalizeTrainTest computes the per-channel statistics on train and
// applies them to train and test (test may be nil). Channels with zero
// variance get std 1.
//
// Not private: the statistics it computes and returns are exact functions
// of every example in train, not covered by any privacy guarantee (a mean
// moves with each example, and anyone who knows the others can read the
// last one off it), and a model trained on data normalized with them
// depends on every example through them, outside the accounting. Do not
// use it on a private training set for a private run, nor publish what it
// returns: use fixed published constants (MNIST's mean 0.1307 and std
// 0.3081, for example) or statistics of public data, and pass them to
// Normalize.
func NormalizeTrainTest(train, test *Dataset) (mean, std []float64, err error) {
	if train == nil {
		return nil, nil, invalidf("normalize: nil training set")
	}
	if test != nil && test.Shape != train.Shape {
		return nil, nil, invalidf("normalize: test shape %v differs from train shape %v", test.Shape, train.Shape)
	}
	mean, std, err = train.ChannelStats()
	if err != nil {
		return nil, nil, err
	}
	for i := range std {
		if std[i] == 0 {
			std[i] = 1
		}
	}
	if err := train.Normalize(mean, std); err != nil {
		return nil, nil, err
	}
	if test != nil {
		if err := test.Normalize(mean, std); err != nil {
			return nil, nil, err
		}
	}
	return mean, std, nil
}
