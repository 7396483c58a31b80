package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// cifarShape is the shape of a CIFAR image (a var because Go has no struct
// constants; nothing assigns it).
var cifarShape = Shape{C: 3, H: 32, W: 32}

// Synthetic returns train and test sets of the given shape whose classes
// are learnable: each class has a fixed smooth template (a few random
// low-frequency waves per channel), and an example is signal times its
// class template plus unit Gaussian noise. Labels are balanced and shuffled.
// Everything is determined by seed; it is benchmark data, not private data.
func Synthetic(nTrain, nTest int, shape Shape, classes int, signal float64, seed uint64) (train, test *Dataset, err error) {
	if nTrain < 0 || nTest < 0 || nTrain+nTest == 0 {
		return nil, nil, invalidf("synthetic: %d train and %d test examples", nTrain, nTest)
	}
	if !shape.valid() || classes <= 0 {
		return nil, nil, invalidf("synthetic: shape %v, %d classes", shape, classes)
	}
	if math.IsNaN(signal) || math.IsInf(signal, 0) {
		return nil, nil, invalidf("synthetic: signal %v", signal)
	}
	s := shape.Size()
	tmpl := make([]float32, classes*s)
	rng := rand.New(rand.NewPCG(seed, 0))
	hw := shape.H * shape.W
	for k := 0; k < classes; k++ {
		for c := 0; c < shape.C; c++ {
			seg := tmpl[k*s+c*hw : k*s+(c+1)*hw]
			const waves = 3
			for range waves {
				fy, fx := rng.Float64()*3/float64(shape.H), rng.Float64()*3/float64(shape.W)
				ph := rng.Float64() * 2 * math.Pi
				for r := 0; r < shape.H; r++ {
					for q := 0; q < shape.W; q++ {
						seg[r*shape.W+q] += float32(math.Sqrt(2.0/waves) * math.Sin(2*math.Pi*(fy*float64(r)+fx*float64(q))+ph))
					}
				}
			}
		}
	}
	gen := func(n int, stream uint64, split string) *Dataset {
		r := rand.New(rand.NewPCG(seed, stream))
		d := &Dataset{Name: "synthetic/" + split, X: make([]float32, n*s), Y: make([]int, n), Shape: shape, Classes: classes}
		for i := range d.Y {
			d.Y[i] = i % classes
		}
		r.Shuffle(n, func(i, j int) { d.Y[i], d.Y[j] = d.Y[j], d.Y[i] })
		for i, l := range d.Y {
			ex := d.X[i*s : (i+1)*s]
			t := tmpl[l*s : (l+1)*s]
			for k := range ex {
				ex[k] = float32(signal)*t[k] + float32(r.NormFloat64())
			}
		}
		return d
	}
	return gen(nTrain, 1, "train"), gen(nTest, 2, "test"), nil
}

// SyntheticCIFAR is Synthetic with CIFAR-10's shape and classes and signal
// 0.3 (per-pixel signal-to-noise well below 1, so a model has to pool
// evidence over the image).
func SyntheticCIFAR(nTrain, nTest int, seed uint64) (train, test *Dataset, err error) {
	train, test, err = Synthetic(nTrain, nTest, cifarShape, 10, 0.3, seed)
	if err != nil {
		return nil, nil, fmt.Errorf("data: synthetic cifar: %w", err)
	}
	return train, test, nil
}
