package models

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/cmplx"
	"sync"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// Scattering is the two-layer 2-D scattering transform of Bruna and
// Mallat (2013) with Morlet wavelets, as Oyallon and Mallat (2015) define
// it and kymatio computes it, the fixed feature extractor ("ScatterNet") of
// Tramèr and Boneh (2021, "Differentially private learning needs better
// features"). It has no parameters and looks at one example at a time, so
// the features of a private data set cost no privacy: they are a fixed
// function of each example, like a change of pixel format.
//
// For each input channel x it returns, at 2^J-fold lower resolution,
//
//	S0 = x * phi,  S1 = |x * psi(j1,t1)| * phi,  S2 = ||x * psi(j1,t1)| * psi(j2,t2)| * phi  (j2 > j1),
//
// 1 + J L + L^2 J (J-1)/2 channels (81 for J = 2, L = 8), in kymatio's
// order: S0, then for each (j1, t1) its S1 followed by its S2 paths. The
// wavelets psi(j, t) are Morlet filters of scale sigma = 0.8 2^j, centre
// frequency xi = 3 pi / (4 2^j), slant 4/L and angle (L/2 - 1 - t) pi / L;
// phi is the Gaussian of scale 0.8 2^(J-1). Each filter is sampled on the
// padded grid and periodized over 5x5 copies (kymatio's filter_bank; we
// keep the complex transform of the sampled filter where kymatio keeps its
// real part, which differs only by the asymmetry of the periodization
// tails, far below float32 resolution). The image is reflect-padded to a power of two at least
// 2^J larger in each dimension, every convolution is circular on that
// grid, and the output is subsampled by 2^J exactly (in the Fourier
// domain, by periodizing the spectrum) with no intermediate subsampling,
// so the features equal direct circular convolution with the filters (the
// tests check this). Output pixel (a, b) is the value at padded position
// (2^J (a + ceil(top/2^J)), 2^J (b + ceil(left/2^J))), top and left being
// the padding above and to the left, (padded - H)/2 and (padded - W)/2.
type Scattering struct {
	J, L   int
	H, W   int // input size
	ph, pw int // padded size (powers of two)
	top    int // rows of padding above; left columns likewise
	left   int
	oh, ow int // output size H>>J, W>>J
	row0   int // first output row and column in the subsampled grid
	col0   int
	phi    []complex128   // Fourier transform of phi, ph x pw
	psi    [][]complex128 // psi(j, t) at index j*L + t
	fr, fc *fft           // transforms of length pw (rows) and ph (columns)
	sr, sc *fft           // transforms of the subsampled grid
}

// NewScattering returns the scattering transform of J scales and L
// angles for h x w inputs. J must be 1 to 4, L 1 to 16, and the output
// at least 1x1.
func NewScattering(h, w, J, L int) (*Scattering, error) {
	if J < 1 || J > 4 || L < 1 || L > 16 {
		return nil, dpcore.Invalid("models", "scattering: J = %d, L = %d: want 1 <= J <= 4 and 1 <= L <= 16", J, L)
	}
	if h>>J < 1 || w>>J < 1 || h > 1024 || w > 1024 {
		return nil, dpcore.Invalid("models", "scattering: a %dx%d input with J = %d: want sides of 2^J to 1024 pixels", h, w, J)
	}
	s := &Scattering{J: J, L: L, H: h, W: w, oh: h >> J, ow: w >> J}
	s.ph, s.pw = pow2(h+1<<J), pow2(w+1<<J)
	s.top, s.left = (s.ph-h)/2, (s.pw-w)/2
	if s.top >= h || s.left >= w || s.ph-h-s.top >= h || s.pw-w-s.left >= w {
		return nil, dpcore.Invalid("models", "scattering: a %dx%d input is too small to reflect-pad to %dx%d", h, w, s.ph, s.pw)
	}
	f := 1 << J
	s.row0, s.col0 = (s.top+f-1)/f, (s.left+f-1)/f
	s.fr, s.fc = newFFT(s.pw), newFFT(s.ph)
	s.sr, s.sc = newFFT(s.pw/f), newFFT(s.ph/f)
	for j := range J {
		for t := range L {
			sigma, theta, xi := MorletParams(j, t, L)
			s.psi = append(s.psi, s.transform(Morlet(s.ph, s.pw, sigma, theta, xi, 4/float64(L))))
		}
	}
	s.phi = s.transform(Gabor(s.ph, s.pw, 0.8*math.Pow(2, float64(J-1)), 0, 0, 1))
	return s, nil
}

// MorletParams are the scale sigma, angle theta and centre frequency xi
// of wavelet psi(j, t) among L angles (kymatio's filter_bank).
func MorletParams(j, t, L int) (sigma, theta, xi float64) {
	return 0.8 * math.Pow(2, float64(j)), float64(L-L/2-1-t) * math.Pi / float64(L), 3.0 / 4.0 * math.Pi / math.Pow(2, float64(j))
}

// Gabor is the Gabor filter of kymatio's gabor_2d sampled on an m x n grid
// centred at index (0, 0) and periodized over 5 x 5 copies of the grid:
// exp(-x^T R diag(1, slant^2) R^T x / (2 sigma^2) + i xi (x cos theta + y
// sin theta)) / (2 pi sigma^2 / slant), row-major, x the row offset.
func Gabor(m, n int, sigma, theta, xi, slant float64) []complex128 {
	c, s := math.Cos(theta), math.Sin(theta)
	// curv = R D R^-1 / (2 sigma^2)
	d := slant * slant
	k := 2 * sigma * sigma
	c00, c01, c11 := (c*c+d*s*s)/k, (c*s-d*s*c)/k, (s*s+d*c*c)/k
	g := make([]complex128, m*n)
	for u := range m {
		for v := range n {
			var sum complex128
			for ex := -2; ex <= 2; ex++ {
				for ey := -2; ey <= 2; ey++ {
					x, y := float64(u+ex*m), float64(v+ey*n)
					re := -(c00*x*x + 2*c01*x*y + c11*y*y)
					sum += cmplx.Exp(complex(re, xi*(x*c+y*s)))
				}
			}
			g[u*n+v] = sum / complex(2*math.Pi*sigma*sigma/slant, 0)
		}
	}
	return g
}

// Morlet is kymatio's morlet_2d: the Gabor filter minus the multiple of
// its envelope that gives it zero mean.
func Morlet(m, n int, sigma, theta, xi, slant float64) []complex128 {
	wv := Gabor(m, n, sigma, theta, xi, slant)
	env := Gabor(m, n, sigma, theta, 0, slant)
	var sw, se complex128
	for i := range wv {
		sw += wv[i]
		se += env[i]
	}
	k := sw / se
	for i := range wv {
		wv[i] -= k * env[i]
	}
	return wv
}

// Channels is the number of output channels per input channel:
// 1 + J L + L^2 J (J-1) / 2.
func (s *Scattering) Channels() int { return 1 + s.J*s.L + s.L*s.L*s.J*(s.J-1)/2 }

// OutShape is the shape of the features of an input with c channels.
func (s *Scattering) OutShape(c int) [3]int { return [3]int{c * s.Channels(), s.oh, s.ow} }

func (s *Scattering) String() string {
	return fmt.Sprintf("scattering J=%d L=%d (%dx%d -> %d channels of %dx%d)", s.J, s.L, s.H, s.W, s.Channels(), s.oh, s.ow)
}

// scratch holds one worker's buffers.
type scatterScratch struct {
	x0, u1, u2, prod []complex128
	small            []complex128
	col              []complex128
}

func (s *Scattering) newScratch() *scatterScratch {
	n := s.ph * s.pw
	return &scatterScratch{
		x0: make([]complex128, n), u1: make([]complex128, n), u2: make([]complex128, n), prod: make([]complex128, n),
		small: make([]complex128, n>>(2*s.J)), col: make([]complex128, max(s.ph, s.pw)),
	}
}

// Transform writes the features of one example with c channels (src, CHW
// order, c*H*W values) to dst (c*Channels()*oh*ow values, CHW order).
func (s *Scattering) Transform(dst, src []float32, c int) error {
	if c < 1 || len(src) != c*s.H*s.W || len(dst) != c*s.Channels()*s.oh*s.ow {
		return dpcore.Invalid("models", "scattering: %d input and %d output values for %d channels of %dx%d", len(src), len(dst), c, s.H, s.W)
	}
	s.transform1(dst, src, c, s.newScratch())
	return nil
}

// TransformBatch transforms n examples of c channels, src holding them one
// after another, on up to workers goroutines (0: one), checking ctx
// between examples.
func (s *Scattering) TransformBatch(ctx context.Context, dst, src []float32, n, c, workers int) error {
	in, out := c*s.H*s.W, c*s.Channels()*s.oh*s.ow
	if c < 1 || n < 0 || len(src) != n*in || len(dst) != n*out {
		return dpcore.Invalid("models", "scattering: %d input and %d output values for %d examples of %d channels of %dx%d", len(src), len(dst), n, c, s.H, s.W)
	}
	workers = max(1, min(workers, n))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := s.newScratch()
			for i := w; i < n; i += workers {
				if i%64 == w {
					if err := ctx.Err(); err != nil {
						errs[w] = err
						return
					}
				}
				s.transform1(dst[i*out:(i+1)*out], src[i*in:(i+1)*in], c, sc)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Scattering) transform1(dst, src []float32, c int, sc *scatterScratch) {
	K, per := s.Channels(), s.oh*s.ow
	for ch := range c {
		out := dst[ch*K*per : (ch+1)*K*per]
		s.pad(sc.x0, src[ch*s.H*s.W:(ch+1)*s.H*s.W])
		s.fft2(sc.x0, false, sc.col)
		k := 0
		s.lowpass(out[k*per:(k+1)*per], sc.x0, sc)
		k++
		for j1 := range s.J {
			for t1 := range s.L {
				// U1 = |x * psi1|, then its transform.
				mulInto(sc.u1, sc.x0, s.psi[j1*s.L+t1])
				s.fft2(sc.u1, true, sc.col)
				modulus(sc.u1)
				s.fft2(sc.u1, false, sc.col)
				s.lowpass(out[k*per:(k+1)*per], sc.u1, sc)
				k++
				for j2 := j1 + 1; j2 < s.J; j2++ {
					for t2 := range s.L {
						mulInto(sc.u2, sc.u1, s.psi[j2*s.L+t2])
						s.fft2(sc.u2, true, sc.col)
						modulus(sc.u2)
						s.fft2(sc.u2, false, sc.col)
						s.lowpass(out[k*per:(k+1)*per], sc.u2, sc)
						k++
					}
				}
			}
		}
	}
}

// pad writes the reflect-padded image (numpy's 'reflect': the edge is not
// repeated) to z.
func (s *Scattering) pad(z []complex128, img []float32) {
	for r := range s.ph {
		ir := reflectIndex(r-s.top, s.H)
		for q := range s.pw {
			z[r*s.pw+q] = complex(float64(img[ir*s.W+reflectIndex(q-s.left, s.W)]), 0)
		}
	}
}

func reflectIndex(i, n int) int {
	for i < 0 || i >= n {
		if i < 0 {
			i = -i
		}
		if i >= n {
			i = 2*(n-1) - i
		}
	}
	return i
}

// lowpass writes Re(z * phi) subsampled by 2^J and cropped to the output
// window, zhat being the transform of z: the product's spectrum is
// periodized onto the coarse grid (subsampling in space) and inverted
// there.
func (s *Scattering) lowpass(out []float32, zhat []complex128, sc *scatterScratch) {
	f := 1 << s.J
	sh, sw := s.ph/f, s.pw/f
	for i := range sc.small {
		sc.small[i] = 0
	}
	for r := range s.ph {
		row := (r % sh) * sw
		for q := range s.pw {
			i := r*s.pw + q
			sc.small[row+q%sw] += zhat[i] * s.phi[i]
		}
	}
	// Subsampling by f in each dimension: y = IFFT(periodized) / f^2.
	fftRows(sc.small, sh, sw, s.sr, true)
	fftCols(sc.small, sh, sw, s.sc, true, sc.col)
	inv := 1 / float64(f*f)
	for a := range s.oh {
		for b := range s.ow {
			out[a*s.ow+b] = float32(real(sc.small[(a+s.row0)*sw+b+s.col0]) * inv)
		}
	}
}

func mulInto(dst, a, b []complex128) {
	for i := range dst {
		dst[i] = a[i] * b[i]
	}
}

func modulus(z []complex128) {
	for i, v := range z {
		z[i] = complex(math.Hypot(real(v), imag(v)), 0)
	}
}

func (s *Scattering) transform(g []complex128) []complex128 {
	col := make([]complex128, max(s.ph, s.pw))
	s.fft2(g, false, col)
	return g
}

// fft2 transforms z (ph x pw, row-major) in place; the inverse includes
// the 1/(ph pw) factor.
func (s *Scattering) fft2(z []complex128, inverse bool, col []complex128) {
	fftRows(z, s.ph, s.pw, s.fr, inverse)
	fftCols(z, s.ph, s.pw, s.fc, inverse, col)
}

func fftRows(z []complex128, h, w int, f *fft, inverse bool) {
	for r := range h {
		f.transform(z[r*w:(r+1)*w], inverse)
	}
}

func fftCols(z []complex128, h, w int, f *fft, inverse bool, col []complex128) {
	col = col[:h]
	for q := range w {
		for r := range h {
			col[r] = z[r*w+q]
		}
		f.transform(col, inverse)
		for r := range h {
			z[r*w+q] = col[r]
		}
	}
}

func pow2(n int) int { return 1 << bits.Len(uint(n-1)) }

// fft is an iterative radix-2 transform of a power-of-two length.
type fft struct {
	n   int
	rev []int
	tw  []complex128 // exp(-2 pi i k / n), k < n/2
}

func newFFT(n int) *fft {
	f := &fft{n: n, rev: make([]int, n), tw: make([]complex128, n/2)}
	lg := bits.Len(uint(n)) - 1
	for i := range n {
		f.rev[i] = int(bits.Reverse(uint(i)) >> (bits.UintSize - lg))
	}
	if n == 1 {
		f.rev[0] = 0
	}
	for k := range n / 2 {
		f.tw[k] = cmplx.Rect(1, -2*math.Pi*float64(k)/float64(n))
	}
	return f
}

// transform computes X[k] = sum_t x[t] exp(-2 pi i k t / n) in place, or
// with inverse x[t] = (1/n) sum_k X[k] exp(2 pi i k t / n).
func (f *fft) transform(x []complex128, inverse bool) {
	n := f.n
	for i, r := range f.rev {
		if i < r {
			x[i], x[r] = x[r], x[i]
		}
	}
	for size := 2; size <= n; size <<= 1 {
		half, step := size/2, n/size
		for start := 0; start < n; start += size {
			for k := range half {
				w := f.tw[k*step]
				if inverse {
					w = complex(real(w), -imag(w))
				}
				a, b := x[start+k], x[start+k+half]*w
				x[start+k], x[start+k+half] = a+b, a-b
			}
		}
	}
	if inverse {
		inv := complex(1/float64(n), 0)
		for i := range x {
			x[i] *= inv
		}
	}
}

// NewScatterNet returns the linear ScatterNet classifier of Tramèr and
// Boneh (2021) for scattering features of inputShape (Scattering.OutShape):
// GroupNorm in groups channel groups (they use 27 for 81 channels; it
// normalizes each example by itself, so it costs no privacy), then one
// dense layer to the classes.
func NewScatterNet(inputShape [3]int, classes, groups int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: scatternet: %w", err)
	}
	if groups <= 0 || inputShape[0]%groups != 0 {
		return nil, dpcore.Invalid("models", "scatternet: %d groups must divide %d channels", groups, inputShape[0])
	}
	return NewBuilder("scatternet", inputShape, seed).GroupNorm("norm", groups).Dense("classifier", classes, nn.Identity).Model()
}
