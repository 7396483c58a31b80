package audit

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// Participation says what the white-box adversary may know about when a
// canary contributes, which is what the run's accounting allows to be
// public.
type Participation struct {
	// Amplified is true when the accounting claims amplification by
	// sampling: the batches are secret, and every step a canary could join
	// is an independent chance with probability Q. False: the batches may be
	// public (unamplified accounting), and the caller reports each canary's
	// steps with Whitebox.Add.
	Amplified bool
	// Q is the per-step inclusion probability (Amplified only).
	Q float64
	// Partitions is the number b of partitions of band sampling: a canary
	// can join only the steps i with (i-1) mod b equal to its partition,
	// which the adversary does not know. 1 for Poisson sampling.
	Partitions int
}

// WhiteboxConfig configures a white-box audit with gradient canaries.
type WhiteboxConfig struct {
	// Canaries is m, Dim the length d >= m of the released update (the
	// model dimension), Steps the number of steps n.
	Canaries, Dim, Steps int
	// ClipNorm is zeta: each canary contributes zeta e_c on the steps it
	// joins.
	ClipNorm float64
	// NoiseStd is the claimed standard deviation s = sigma * zeta * sens of
	// the noise added to each step's sum (before any division by the batch
	// size; observations must be taken at the same scale).
	NoiseStd float64
	// Factorization is the mechanism whose noise W = A^-1 B Z is added; nil
	// for independent noise (DP-SGD).
	Factorization *mfnoise.Factorization
	Participation Participation
	// Seed fixes membership and coordinates for a reproducible audit; nil
	// draws them from crypto/rand.
	Seed *dpcore.Seed
}

// maxObservations bounds m * n (the float64 observations kept): 2 GiB.
const maxObservations = 1 << 28

// Whitebox runs the white-box side of an audit: it draws each canary's
// membership (probability 1/2) and coordinate, adds the IN canaries'
// gradients to the steps they join, records the released noisy updates at
// the canary coordinates, and scores them whitened by the mechanism's noise
// correlation (see the package comment). It is what package train uses, and
// what a service auditing its own training loop or streaming aggregate
// uses: call Add and Observe once per step, in order, then Result.
type Whitebox struct {
	cfg    WhiteboxConfig
	in     []bool
	coord  []int
	obs    []float64 // n x m, row i = step i+1
	steps  [][]int32 // known participation (0-based steps) per canary
	step   int       // steps observed
	added  int       // steps whose Add ran
	failed error
}

// NewWhitebox checks cfg and draws membership and coordinates.
func NewWhitebox(cfg WhiteboxConfig) (*Whitebox, error) {
	m, d, n := cfg.Canaries, cfg.Dim, cfg.Steps
	if m < 2 {
		return nil, invalidf("whitebox: %d canaries, want at least 2", m)
	}
	if n <= 0 {
		return nil, invalidf("whitebox: %d steps", n)
	}
	if d < m {
		return nil, invalidf("whitebox: %d canaries need a coordinate each but the update has %d", m, d)
	}
	if float64(m)*float64(n) > maxObservations {
		return nil, invalidf("whitebox: %d canaries x %d steps need %.1f GiB of observations (limit %.0f GiB)", m, n, float64(m)*float64(n)*8/(1<<30), float64(maxObservations)*8/(1<<30))
	}
	if !(cfg.ClipNorm > 0) || math.IsInf(cfg.ClipNorm, 0) {
		return nil, invalidf("whitebox: clip norm %v", cfg.ClipNorm)
	}
	if !(cfg.NoiseStd > 0) || math.IsInf(cfg.NoiseStd, 0) {
		return nil, invalidf("whitebox: noise std %v, want positive and finite", cfg.NoiseStd)
	}
	if f := cfg.Factorization; f != nil && f.N() != n {
		return nil, invalidf("whitebox: factorization has %d steps, the run %d", f.N(), n)
	}
	p := cfg.Participation
	if p.Amplified {
		if !(p.Q > 0 && p.Q < 1) {
			return nil, invalidf("whitebox: sampling rate %v, want (0, 1)", p.Q)
		}
		if p.Partitions < 1 || p.Partitions > n {
			return nil, invalidf("whitebox: %d partitions for %d steps", p.Partitions, n)
		}
	}
	var seed [32]byte
	if cfg.Seed != nil {
		seed = sha256.Sum256(append([]byte("audit/whitebox/"), cfg.Seed[:]...))
	} else if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("audit: seeding: %w", err)
	}
	rng := mrand.New(mrand.NewChaCha8(seed))
	w := &Whitebox{cfg: cfg, in: make([]bool, m), obs: make([]float64, m*n), steps: make([][]int32, m)}
	for j := range w.in {
		w.in[j] = rng.Uint64()&1 == 1
	}
	w.coord = rng.Perm(d)[:m]
	return w, nil
}

// Canaries is the number of canaries m.
func (w *Whitebox) Canaries() int { return len(w.in) }

// In reports whether canary j is included (IN). A service adds the
// gradients of IN canaries only; OUT canaries are zeroed out.
func (w *Whitebox) In(j int) bool { return w.in[j] }

// Membership is a copy of every canary's membership.
func (w *Whitebox) Membership() []bool { return append([]bool(nil), w.in...) }

// Coordinate is the coordinate c_j of canary j's gradient zeta e_{c_j}.
func (w *Whitebox) Coordinate(j int) int { return w.coord[j] }

// Add records that the canaries in sampled (canary numbers in [0, m)) join
// step (1-based, the next one) and adds zeta e_c of the IN ones to sum
// (len Dim), the step's clipped gradient sum before noise. Call it for every
// step, with an empty list if no canary joins.
func (w *Whitebox) Add(step int, sampled []int, sum []float32) error {
	if w.failed != nil {
		return w.failed
	}
	if step != w.added+1 || step > w.cfg.Steps {
		return w.fail(invalidf("whitebox: Add for step %d, want step %d of %d", step, w.added+1, w.cfg.Steps))
	}
	if len(sum) != w.cfg.Dim {
		return w.fail(invalidf("whitebox: sum of length %d, want %d", len(sum), w.cfg.Dim))
	}
	for _, j := range sampled {
		if j < 0 || j >= len(w.in) {
			return w.fail(invalidf("whitebox: canary %d out of [0, %d)", j, len(w.in)))
		}
		w.steps[j] = append(w.steps[j], int32(step-1))
		if w.in[j] {
			sum[w.coord[j]] += float32(w.cfg.ClipNorm)
		}
	}
	w.added = step
	return nil
}

// Observe records the released noisy sum of step (after noise, at the scale
// of Add's sum) minus the clean part the adversary knows (the sum of the
// other examples' clipped gradients, nil if none): what the strongest
// adversary sees of the canaries.
func (w *Whitebox) Observe(step int, released, clean []float32) error {
	if w.failed != nil {
		return w.failed
	}
	if step != w.step+1 || step != w.added {
		return w.fail(invalidf("whitebox: Observe for step %d after %d observed and %d added", step, w.step, w.added))
	}
	if len(released) != w.cfg.Dim || (clean != nil && len(clean) != w.cfg.Dim) {
		return w.fail(invalidf("whitebox: observation of length %d, want %d", len(released), w.cfg.Dim))
	}
	m := len(w.in)
	row := w.obs[(step-1)*m : step*m]
	for j, c := range w.coord {
		v := float64(released[c])
		if clean != nil {
			v -= float64(clean[c])
		}
		row[j] = v
	}
	w.step = step
	return nil
}

func (w *Whitebox) fail(err error) error {
	w.failed = err
	return err
}

// Scores returns each canary's score (higher: more likely IN) once every
// step has been observed: the log-likelihood ratio of IN against OUT of its
// whitened observations (package comment).
func (w *Whitebox) Scores() ([]float64, error) {
	if w.failed != nil {
		return nil, w.failed
	}
	n, m := w.cfg.Steps, len(w.in)
	if w.step != n {
		return nil, invalidf("whitebox: %d of %d steps observed", w.step, n)
	}
	prec, err := precision(w.cfg.Factorization, n)
	if err != nil {
		return nil, err
	}
	y := mat.NewDense(n, m, w.obs)
	var py mat.Dense // P Y: column j is P y_j
	if prec != nil {
		py.Mul(prec, y)
	} else {
		py.CloneFrom(y)
	}
	if !w.cfg.Participation.Amplified {
		return w.knownStepScores(&py, prec)
	}
	return w.amplifiedScores(&py, prec), nil
}

// knownStepScores are the scores without amplification: one Gaussian test
// per canary on its known steps S: t = 1_S' P y / (s sqrt(1_S' P 1_S)),
// mu = zeta sqrt(1_S' P 1_S) / s, the score mu t - mu^2/2. prec nil is
// the identity.
func (w *Whitebox) knownStepScores(py *mat.Dense, prec *mat.SymDense) ([]float64, error) {
	s, zeta := w.cfg.NoiseStd, w.cfg.ClipNorm
	scores := make([]float64, len(w.in))
	for j := range scores {
		st := w.steps[j]
		if len(st) == 0 {
			continue // never sampled: no information, score 0
		}
		var num, quad float64
		for _, a := range st {
			num += py.At(int(a), j)
			for _, b := range st {
				if prec == nil {
					if a == b {
						quad++
					}
				} else {
					quad += prec.At(int(a), int(b))
				}
			}
		}
		if !(quad > 0) {
			return nil, fmt.Errorf("audit: whitebox: noise precision is not positive definite on the steps of canary %d", j)
		}
		mu := zeta * math.Sqrt(quad) / s
		t := num / (s * math.Sqrt(quad))
		scores[j] = mu*t - mu*mu/2
	}
	return scores, nil
}

// amplifiedScores are the scores with amplification: step i is a chance
// with probability q; its whitened statistic t_i = (P y)_i / (s
// sqrt(P_ii)) is N(mu_i, 1) if the canary joined it, N(0, 1) otherwise,
// mu_i = zeta sqrt(P_ii) / s. For a banded encoder with bands <= b,
// chances of one partition use disjoint rows of C, so their statistics
// are independent; the score mixes over the unknown partition, uniform.
func (w *Whitebox) amplifiedScores(py *mat.Dense, prec *mat.SymDense) []float64 {
	n := w.cfg.Steps
	s, zeta := w.cfg.NoiseStd, w.cfg.ClipNorm
	q, b := w.cfg.Participation.Q, w.cfg.Participation.Partitions
	pdiag := func(i int) float64 {
		if prec == nil {
			return 1
		}
		return prec.At(i, i)
	}
	l1q, lq := math.Log1p(-q), math.Log(q)
	scores := make([]float64, len(w.in))
	perPart := make([]float64, b)
	for j := range scores {
		clear(perPart)
		for i := 0; i < n; i++ {
			pii := pdiag(i)
			mu := zeta * math.Sqrt(pii) / s
			t := py.At(i, j) / (s * math.Sqrt(pii))
			perPart[i%b] += logAddExp(l1q, lq+mu*t-mu*mu/2)
		}
		mx := math.Inf(-1)
		for _, v := range perPart {
			mx = math.Max(mx, v)
		}
		var acc float64
		for _, v := range perPart {
			acc += math.Exp(v - mx)
		}
		scores[j] = mx + math.Log(acc/float64(b))
	}
	return scores
}

func logAddExp(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// Result scores the canaries and returns the lower bound (FromScores).
func (w *Whitebox) Result(delta, confidence float64, search Search) (Result, error) {
	scores, err := w.Scores()
	if err != nil {
		return Result{}, err
	}
	return FromScores(scores, w.in, delta, confidence, search)
}

// precision returns the per-coordinate noise precision P = (G G^T)^-1 of a
// mechanism with gradient-space noise W = G Z, G = A^-1 B: C^T C for a
// square encoder (G = C^-1), the inverse of G G^T otherwise. Nil means the
// identity (independent noise).
func precision(f *mfnoise.Factorization, n int) (*mat.SymDense, error) {
	if f == nil {
		return nil, nil
	}
	c := f.Encoder
	r, cols := c.Dims()
	if cols != n {
		return nil, invalidf("whitebox: encoder has %d columns for %d steps", cols, n)
	}
	if r == n {
		if isIdentity(c) {
			return nil, nil
		}
		p := mat.NewSymDense(n, nil)
		p.SymOuterK(1, c.T())
		return p, nil
	}
	a, err := f.Workload.Matrix()
	if err != nil {
		return nil, fmt.Errorf("audit: whitebox: %w", err)
	}
	var g mat.Dense
	if err := g.Solve(a, f.Decoder); err != nil {
		return nil, fmt.Errorf("audit: whitebox: solving A G = B: %w", err)
	}
	cov := mat.NewSymDense(n, nil)
	cov.SymOuterK(1, &g)
	var ch mat.Cholesky
	if !ch.Factorize(cov) {
		return nil, fmt.Errorf("audit: whitebox: noise covariance G G^T is not positive definite")
	}
	p := mat.NewSymDense(n, nil)
	if err := ch.InverseTo(p); err != nil {
		return nil, fmt.Errorf("audit: whitebox: inverting the noise covariance: %w", err)
	}
	return p, nil
}

func isIdentity(c *mat.Dense) bool {
	r, n := c.Dims()
	for i := 0; i < r; i++ {
		for j := 0; j < n; j++ {
			v := c.At(i, j)
			if (i == j && v != 1) || (i != j && v != 0) {
				return false
			}
		}
	}
	return true
}
