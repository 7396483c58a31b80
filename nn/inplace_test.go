package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	gblas "gonum.org/v1/gonum/blas"
)

// sparseSpecials fills v with normal values of many magnitudes, one in
// every few hundred a special (zeros of both signs, subnormals, the
// largest finite values, infinities, NaNs of two payloads).
func sparseSpecials(rng *rand.Rand, v []float32) {
	nan2 := math.Float32frombits(0x7fc00123)
	for k := range v {
		v[k] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
		if rng.IntN(300) == 0 {
			if rng.IntN(4) == 0 {
				v[k] = nan2
			} else {
				v[k] = specials[rng.IntN(len(specials))]
			}
		}
	}
}

// TestDenseKernels: a dense layer's forward product and input gradient
// read from its weight in place (denseForward, denseBackward) give, bit
// for bit, the packed products the plan made before (SgemmPacked over W
// packed, and over Wᵀ packed), for chunks of 1 to 9 rows and widths with
// one and several blocks of k.
func TestDenseKernels(t *testing.T) {
	if !hasDenseKernels() {
		t.Skip("no dense kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(42, 43))
	var gemm blas.Serial32
	for _, fi := range []int{16, 48, 256, 272, 528} {
		for _, fo := range []int{64, 128, 320} {
			for m := 1; m <= 9; m++ {
				s := &stage{kind: kDense, fi: fi, fo: fo}
				w := &worker{dpad: make([]float32, 4*max(fi, fo)), dpadC: make([]float32, 4*max(fi, fo))}
				W := make([]float32, fi*fo)
				a := make([]float32, m*fi)
				g := make([]float32, m*fo)
				sparseSpecials(rng, W)
				sparseSpecials(rng, a)
				sparseSpecials(rng, g)
				var pw, pwt blas.PackedB32
				blas.PackB32(gblas.NoTrans, fi, fo, 1, W, fo, &pw)
				blas.PackB32(gblas.Trans, fo, fi, 1, W, fo, &pwt)
				got, want := make([]float32, m*fo), make([]float32, m*fo)
				randSpecial(rng, got) // overwritten
				w.denseForward(s, W, m, a, got)
				gemm.SgemmPacked(gblas.NoTrans, m, a, fi, &pw, 0, want, fo)
				sameBits(t, fmt.Sprintf("forward %dx%dx%d", m, fo, fi), got, want)
				got, want = make([]float32, m*fi), make([]float32, m*fi)
				randSpecial(rng, got)
				w.denseBackward(s, W, m, g, got)
				gemm.SgemmPacked(gblas.NoTrans, m, g, fo, &pwt, 0, want, fi)
				sameBits(t, fmt.Sprintf("input gradient %dx%dx%d", m, fi, fo), got, want)
			}
		}
	}
}

// headNet is a small network whose first dense layer (256x256) is read
// in place.
func headNet() *builder {
	b := &builder{net: Network{Input: Shape{3, 8, 8}}}
	b.conv(3, 16, 3, 1, 1, Tanh)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2}, Flatten{})
	b.dense(256, 256, Tanh)
	b.dense(256, 10, Identity)
	return b
}

// TestDenseInPlace: a plan reading its large dense layer's weight in
// place (Plan.inPlace) gives the packed products' per-example gradients,
// losses, sums (clipped and not) and logits bit for bit, with a last
// chunk of three examples (rows padded to four).
func TestDenseInPlace(t *testing.T) {
	if !hasDenseKernels() {
		t.Skip("no dense kernels on this CPU")
	}
	b := headNet()
	const n = 7
	rng := rand.New(rand.NewPCG(44, 45))
	params := randParams(rng, b.n)
	opt := Options{MaxBatch: n, Workers: 2, Chunk: 4}
	p, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.noDenseInPlace = true
	ref, err := NewPlan(b.net, params, opt)
	if err != nil {
		t.Fatal(err)
	}
	inPlace := 0
	for i := range p.stages {
		if p.inPlace(&p.stages[i]) {
			inPlace++
		}
		if ref.inPlace(&ref.stages[i]) {
			t.Fatal("the reference plan reads a dense weight in place")
		}
	}
	if inPlace != 1 {
		t.Fatalf("%d dense layers read in place, want 1", inPlace)
	}
	x, _ := samePlans(t, p, ref, b, rng, n, 10)
	sz := len(x) / n
	x[3*sz+1] = 0 // Forward takes finite inputs only
	lgp, lgr := make([]float32, n*10), make([]float32, n*10)
	if err := p.Forward(x, lgp); err != nil {
		t.Fatal(err)
	}
	if err := ref.Forward(x, lgr); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "logits", lgp, lgr)
}

// TestPackJobs: workers taking the layers' packing in turn, each
// waiting only for the layers it reaches still being packed (packShare),
// give the fixed shares' gradients, losses, sums and logits bit for bit
// on every test network without an embedding (two workers).
func TestPackJobs(t *testing.T) {
	for name, b := range testNets() {
		if _, ok := b.net.Layers[0].(Embedding); ok {
			continue // (testPlanSwitch's inputs are not ids)
		}
		t.Run(name, func(t *testing.T) {
			testPlanSwitch(t, name, func(o *Options) { o.noPackJobs = true })
		})
	}
}

// TestTransposeTo: the blocked transpose (16x16 blocks with AVX-512)
// moves every element, NaN payloads included, where the loop does, and
// writes nothing else.
func TestTransposeTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 47))
	for _, rows := range []int{0, 5, 16, 32, 48} {
		for _, cols := range []int{0, 16, 17, 64} {
			lds, ldd := cols+3, rows+5
			src := make([]float32, max(1, rows*lds))
			sparseSpecials(rng, src)
			for k := range src {
				if rng.IntN(50) == 0 {
					src[k] = math.Float32frombits(0x7f800000 | uint32(rng.IntN(1<<22)+1)) // signalling NaNs
				}
			}
			got, want := make([]float32, max(1, cols*ldd)), make([]float32, max(1, cols*ldd))
			for k := range got {
				got[k] = float32(k)
				want[k] = float32(k)
			}
			transposeTo(got, ldd, src, lds, rows, cols)
			transposeLoop(want, ldd, src, lds, rows, cols)
			for k := range got {
				if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
					t.Fatalf("%dx%d: element %d: %#x, want %#x", rows, cols, k, math.Float32bits(got[k]), math.Float32bits(want[k]))
				}
			}
		}
	}
}

// TestInPlaceProducts: a step whose large dense layer reads its weight in
// place logs that layer's forward product and input gradient as in-place
// products (B = W, and B = Wᵀ marked TransB), each over every example of
// the chunk; TimeProducts times them with the in-place kernels (which
// accept only the layout the step uses) rather than as packed products.
func TestInPlaceProducts(t *testing.T) {
	if !hasDenseKernels() {
		t.Skip("no dense kernels on this CPU")
	}
	b := headNet()
	const n = 7
	rng := rand.New(rand.NewPCG(46, 47))
	params := randParams(rng, b.n)
	p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 4})
	if err != nil {
		t.Fatal(err)
	}
	x, y := b.batch(rng, n, 10)
	p.RecordProducts(true)
	if _, err := p.Step(x, y, make([]float32, b.n), &testClipper{}); err != nil {
		t.Fatal(err)
	}
	list := p.Products()
	p.RecordProducts(false)
	rows := map[bool]int{}
	var inPlace []Product
	for _, q := range list {
		if !q.InPlace {
			continue
		}
		inPlace = append(inPlace, q)
		if q.PackedB || q.TransA || q.K != 256 || q.N != 256 || q.LDB != 256 {
			t.Errorf("in-place product %+v: not the 256x256 weight read in place", q)
		}
		rows[q.TransB] += q.M * q.Count
	}
	if rows[false] != n || rows[true] != n {
		t.Fatalf("in-place rows forward %d, input gradient %d; want %d each: %+v", rows[false], rows[true], n, list)
	}
	d, err := p.TimeProducts(inPlace, time.Millisecond)
	if err != nil || d <= 0 {
		t.Fatalf("TimeProducts(in place) = %v, %v", d, err)
	}
	bad := inPlace[0]
	bad.LDB++
	if _, err := p.TimeProducts([]Product{bad}, 0); err == nil {
		t.Errorf("an in-place product of leading dimension %d (W has %d columns) was timed", bad.LDB, bad.LDB-1)
	}
}
