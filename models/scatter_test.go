package models

import (
	"context"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"
)

// refFilter samples kymatio's gabor_2d / morlet_2d formulas directly (a
// rotation matrix product, as kymatio writes them), independently of
// Gabor and Morlet.
func refFilter(m, n int, sigma, theta, xi, slant float64, morlet bool) [][]complex128 {
	R := [2][2]float64{{math.Cos(theta), -math.Sin(theta)}, {math.Sin(theta), math.Cos(theta)}}
	Rinv := [2][2]float64{{math.Cos(theta), math.Sin(theta)}, {-math.Sin(theta), math.Cos(theta)}}
	D := [2][2]float64{{1, 0}, {0, slant * slant}}
	var curv [2][2]float64
	for i := range 2 {
		for j := range 2 {
			for k := range 2 {
				for l := range 2 {
					curv[i][j] += R[i][k] * D[k][l] * Rinv[l][j]
				}
			}
			curv[i][j] /= 2 * sigma * sigma
		}
	}
	gab := func(xi float64) [][]complex128 {
		g := make([][]complex128, m)
		for u := range m {
			g[u] = make([]complex128, n)
			for v := range n {
				for ex := -2; ex <= 2; ex++ {
					for ey := -2; ey <= 2; ey++ {
						x, y := float64(u+ex*m), float64(v+ey*n)
						arg := complex(-(curv[0][0]*x*x + (curv[0][1]+curv[1][0])*x*y + curv[1][1]*y*y), x*math.Cos(theta)*xi+y*math.Sin(theta)*xi)
						g[u][v] += cmplx.Exp(arg)
					}
				}
				g[u][v] /= complex(2*math.Pi*sigma*sigma/slant, 0)
			}
		}
		return g
	}
	g := gab(xi)
	if !morlet {
		return g
	}
	e := gab(0)
	var sg, se complex128
	for u := range m {
		for v := range n {
			sg += g[u][v]
			se += e[u][v]
		}
	}
	for u := range m {
		for v := range n {
			g[u][v] -= sg / se * e[u][v]
		}
	}
	return g
}

// circ is the direct circular convolution (x * f)[p] = sum_q x[q] f[p - q].
func circ(x, f [][]complex128) [][]complex128 {
	m, n := len(x), len(x[0])
	y := make([][]complex128, m)
	for p := range m {
		y[p] = make([]complex128, n)
		for r := range n {
			for q := range m {
				for s := range n {
					y[p][r] += x[q][s] * f[((p-q)%m+m)%m][((r-s)%n+n)%n]
				}
			}
		}
	}
	return y
}

func absGrid(x [][]complex128) [][]complex128 {
	y := make([][]complex128, len(x))
	for i := range x {
		y[i] = make([]complex128, len(x[i]))
		for j, v := range x[i] {
			y[i][j] = complex(cmplx.Abs(v), 0)
		}
	}
	return y
}

// TestScatteringMatchesDirectConvolution checks every channel of the
// FFT-based transform against direct circular convolution with
// independently sampled Morlet wavelets, modulus, Gaussian lowpass and
// subsampling, on a random 12x12 image (J = 2, L = 4: 25 channels of 3x3,
// padded to 16x16 with numpy's 'reflect').
func TestScatteringMatchesDirectConvolution(t *testing.T) {
	const h, w, J, L = 12, 12, 2, 4
	s, err := NewScattering(h, w, J, L)
	if err != nil {
		t.Fatal(err)
	}
	if s.Channels() != 1+J*L+L*L*J*(J-1)/2 || s.OutShape(1) != [3]int{25, 3, 3} {
		t.Fatalf("channels %d, shape %v", s.Channels(), s.OutShape(1))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	img := make([]float32, h*w)
	for i := range img {
		img[i] = rng.Float32()
	}
	got := make([]float32, 25*9)
	if err := s.Transform(got, img, 1); err != nil {
		t.Fatal(err)
	}
	// Reference: pad 2 on each side by reflection (12 + 4 -> 16).
	const P, pad = 16, 2
	refl := func(i, n int) int {
		if i < 0 {
			return -i
		}
		if i >= n {
			return 2*(n-1) - i
		}
		return i
	}
	x := make([][]complex128, P)
	for r := range P {
		x[r] = make([]complex128, P)
		for c := range P {
			x[r][c] = complex(float64(img[refl(r-pad, h)*w+refl(c-pad, w)]), 0)
		}
	}
	phi := refFilter(P, P, 0.8*2, 0, 0, 1, false)
	psi := func(j, th int) [][]complex128 {
		return refFilter(P, P, 0.8*math.Pow(2, float64(j)), float64(L-L/2-1-th)*math.Pi/L, 0.75*math.Pi/math.Pow(2, float64(j)), 4.0/L, true)
	}
	var want [][]float64
	sample := func(u [][]complex128) {
		y := circ(u, phi)
		// Output (a, b) sits at padded position 4 (a + ceil(2/4)) = 4 (a + 1).
		var o []float64
		for a := range 3 {
			for b := range 3 {
				o = append(o, real(y[4*(a+1)][4*(b+1)]))
			}
		}
		want = append(want, o)
	}
	sample(x)
	for j1 := range J {
		for t1 := range L {
			u1 := absGrid(circ(x, psi(j1, t1)))
			sample(u1)
			for j2 := j1 + 1; j2 < J; j2++ {
				for t2 := range L {
					sample(absGrid(circ(u1, psi(j2, t2))))
				}
			}
		}
	}
	for k, ch := range want {
		for i, v := range ch {
			g := float64(got[k*9+i])
			if math.Abs(g-v) > 1e-6*(1+math.Abs(v)) {
				t.Errorf("channel %d pixel %d: got %.9g, direct convolution %.9g", k, i, g, v)
			}
		}
	}
	// The image is not constant, so the wavelet channels are not zero.
	if want[1][4] == 0 || want[10][4] == 0 {
		t.Fatal("reference is degenerate")
	}
}

// TestScatteringFashionShape checks the ScatterNet shape of Tramèr and
// Boneh (81 channels of 7x7 for 28x28) and that batch and single
// transforms agree.
func TestScatteringFashionShape(t *testing.T) {
	s, err := NewScattering(28, 28, 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	if s.OutShape(1) != [3]int{81, 7, 7} {
		t.Fatalf("shape %v", s.OutShape(1))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 3*784)
	for i := range src {
		src[i] = rng.Float32()
	}
	batch := make([]float32, 3*81*49)
	if err := s.TransformBatch(context.Background(), batch, src, 3, 1, 2); err != nil {
		t.Fatal(err)
	}
	one := make([]float32, 81*49)
	for i := range 3 {
		if err := s.Transform(one, src[i*784:(i+1)*784], 1); err != nil {
			t.Fatal(err)
		}
		for k, v := range one {
			if batch[i*81*49+k] != v {
				t.Fatalf("example %d value %d: batch %v, single %v", i, k, batch[i*81*49+k], v)
			}
		}
	}
	if _, err := NewScattering(3, 28, 2, 8); err == nil {
		t.Error("a 3-pixel-high input was accepted for J = 2")
	}
	if err := s.Transform(one[:10], src[:784], 1); err == nil {
		t.Error("a short output buffer was accepted")
	}
}

func TestFFTMatchesDFT(t *testing.T) {
	for _, n := range []int{1, 2, 8, 32} {
		f := newFFT(n)
		rng := rand.New(rand.NewPCG(5, uint64(n)))
		x := make([]complex128, n)
		for i := range x {
			x[i] = complex(rng.NormFloat64(), rng.NormFloat64())
		}
		y := append([]complex128(nil), x...)
		f.transform(y, false)
		for k := range n {
			var want complex128
			for j := range n {
				want += x[j] * cmplx.Rect(1, -2*math.Pi*float64(j*k)/float64(n))
			}
			if cmplx.Abs(y[k]-want) > 1e-9 {
				t.Fatalf("n = %d, k = %d: %v, DFT %v", n, k, y[k], want)
			}
		}
		f.transform(y, true)
		for i := range x {
			if cmplx.Abs(y[i]-x[i]) > 1e-12 {
				t.Fatalf("n = %d: inverse does not round-trip at %d", n, i)
			}
		}
	}
}

func BenchmarkScatteringFashion(b *testing.B) {
	s, _ := NewScattering(28, 28, 2, 8)
	src := make([]float32, 784)
	for i := range src {
		src[i] = float32(i%17) / 17
	}
	dst := make([]float32, 81*49)
	for b.Loop() {
		s.Transform(dst, src, 1)
	}
}
