package aggregate

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/noise"
	"github.com/dpmf-go/dpmf/privacy"
	bolt "go.etcd.io/bbolt"
	"gonum.org/v1/gonum/mat"
)

// The exact release (docs/math.md, "Exact arithmetic of the release").
//
// The one operation on which privacy depends is releasing the encoded sums
// Y = C X + noise; decoding with B is post-processing. This path computes Y
// in integers and draws its noise from the discrete Gaussian exactly, so no
// floating-point rounding can reveal anything about X:
//
//   - a record (clipped as before) becomes the integer vector
//     round(rec * 2^gridBits / Clip), with its squared L2 norm enforced
//     exactly to at most norm2Max in integer arithmetic;
//   - step sums X~_t are exact int64 sums of those vectors;
//   - the encoder is quantized to integers c~ = round(C * 2^encBits)
//     (|c~| <= 2^40), and row r of the encoded sum, E_r = sum_j c~[r,j]
//     X~_j, is computed in 128-bit integers;
//   - Y_r = E_r + Z_r with Z_r ~ N_Z(0, sigmaZ^2) per coordinate (package
//     noise's exact sampler), where sigmaZ = sigma * sensQ * normGrid *
//     2^encBits, sensQ >= sens(c~ / 2^encBits) and normGrid >= the
//     record's norm on the grid: the discrete Gaussian mechanism on the
//     integer-valued query c~ X~, accounted by the planner (privacy.PlanRelease);
//   - the release is computed from the exact Y_r only: theta_t = sum_r
//     B[t,r] Y_r / (2^encBits * scale) in float64, then the workload's
//     difference (momentum, window). Row r is computed at the step of its
//     last nonzero column; the decoder must read only rows computed by
//     then (causal), else the mechanism is refused.

// Store buckets of the exact path: steps/<t> holds X~_t (D int64) while a
// later encoder row reads it; encoded/<r> holds Y_r (D int128, 16 bytes
// little-endian two's complement each) while a later decoder row reads it.
var (
	bucketSteps   = []byte("steps")
	bucketEncoded = []byte("encoded")
)

// arithmeticExact is the fingerprint value of stores made by this path;
// arithmeticExactV1 that of stores made before issue 43, whose noise
// multiplier was calibrated by zCDP alone (privacy.ReleaseRequest.CalibrationV1).
const (
	arithmeticExact   = "exact-discrete-gaussian-v2"
	arithmeticExactV1 = "exact-discrete-gaussian-v1"
)

// rowSource is the exact noise stream, noise.ExactRows (tests wrap it to
// watch or hold its draws: Config.wrapRows).
type rowSource interface {
	Next(dst []*big.Int) error
	Step() int
	MarshalBinary() ([]byte, error)
	UnmarshalBinary(data []byte) error
}

// aheadRows is the noise of the encoder rows computed at step, drawn by
// drawAhead before the step's release (off its path).
type aheadRows struct {
	step int
	rows []noiseRow
	err  error
	done chan struct{} // closed when rows (or err) are set
}

// noiseRow is one row of integer noise: the coordinates that fit in 64
// bits in small (almost all of them: |z| < 2^63 for sigma_Z <= 2^56 but
// with probability e^-2^13), the others in large.
type noiseRow struct {
	small []int64
	large map[int]*big.Int
}

type centry struct {
	col int
	c   int64
}

type dentry struct {
	row int
	b   float64
}

type exactPath struct {
	gridBits int
	scale    float64 // 2^gridBits / Clip
	norm2Max uint64  // enforced bound on the squared norm of a grid record
	normGrid float64 // >= sqrt(norm2Max)
	encBits  int
	m        int
	enc      [][]centry // quantized encoder rows
	rowsAt   [][]int    // rowsAt[t-1]: encoder rows computed at step t
	rowStep  []int      // step at which row r is computed
	dec      [][]dentry // decoder rows
	xLast    []int      // xLast[t-1]: last step reading X~_t
	yLast    []int      // last step reading Y_r (0: none)
	sensQ    float64
	maxErr   float64 // max |c~ 2^-encBits - C|
	sigmaZ   float64
	unit     float64 // data units of one unit of Y
	noise    rowSource
	ahead    *aheadRows        // the noise of the next step, drawn off the release path
	xs       map[int][]int64   // live step sums by step
	ys       map[int][]float64 // live Y_r in data units by row
	dim      int
}

// newExactPath lays the mechanism's encoder, decoder and the records of
// norm at most norm on their integer grids. Its noise is set by calibrate,
// once the planner has accounted for the rounding (lattice).
func newExactPath(cfg Config, dim int, norm float64) (*exactPath, error) {
	name := cfg.Mechanism.Name()
	c, b, err := cfg.Mechanism.Strategy().Matrices()
	if err != nil {
		return nil, fmt.Errorf("aggregate: mechanism %s: %w", name, err)
	}
	m, _ := c.Dims()
	e := &exactPath{m: m, dim: dim, xs: map[int][]int64{}, ys: map[int][]float64{}}
	if err := e.quantizeEncoder(c, name); err != nil {
		return nil, err
	}
	if err := e.readDecoder(b, name); err != nil {
		return nil, err
	}
	if peak := e.livePeak(); int64(peak)*int64(dim)*8 > cfg.NoiseMemory {
		need := int64(peak) * int64(dim) * 8
		return nil, invalidf("the exact release of %s keeps up to %d step sums and encoded rows of dimension %d: %d bytes (%.1f MiB), over the noise memory of %d bytes",
			name, peak, dim, need, float64(need)/(1<<20), cfg.NoiseMemory)
	}
	if err := e.checkClip(cfg); err != nil {
		return nil, err
	}
	e.setGrid(cfg, norm)
	return e, nil
}

// checkClip refuses a clip norm for which the arithmetic of the release is
// not finite: the grid's scale 2^gridBits / Clip and the data unit of one
// unit of Y, Clip / 2^(gridBits+encBits), must be normal float64 numbers,
// and so must the largest release the 128-bit encoded sums can produce
// (|Y_r| < 2^127 units, times the largest sum of |B| over a decoder row,
// times 2 for the workload's difference), which grows with Clip. Outside
// that range the noise scale, the ledger or the releases overflow (a
// release of +Inf cannot be served) or lose their precision.
func (e *exactPath) checkClip(cfg Config) error {
	g := gridBits(cfg.Dim)
	rowSum := 0.0
	for _, row := range e.dec {
		s := 0.0
		for _, de := range row {
			s += math.Abs(de.b)
		}
		rowSum = max(rowSum, s)
	}
	lo := math.Ldexp(1, max(e.encBits, 0)+g-1021)
	hi := math.MaxFloat64 / math.Sqrt2 // the record norm with the count coordinate
	if rowSum > 0 {
		hi = min(hi, math.Ldexp(math.MaxFloat64/rowSum, e.encBits+g-128))
	}
	if !(cfg.Clip >= lo && cfg.Clip <= hi) {
		return invalidf("clip norm %g is out of range: with %s and dimension %d the noise scale and the releases are finite float64 numbers only for a clip norm in [%.3g, %.3g]",
			cfg.Clip, cfg.Mechanism.Name(), cfg.Dim, lo, hi)
	}
	return nil
}

// gridBits is the contribution grid's resolution: 2^gridBits units per
// clip norm (setGrid).
func gridBits(dim int) int {
	return min(30, max(20, int(math.Ceil(math.Log2(math.Sqrt(float64(dim)))))+14))
}

// quantizeEncoder puts C on the coarsest scale 2^-encBits on which every
// entry is an integer (0 for 0/1 encoders such as trees and DP-SGD),
// unless that needs entries above 2^40: then it rounds to max|c~| < 2^40.
// Each entry moves by at most maxErr (at most half a unit; 0 when C is on
// the scale): the planner bounds the sensitivity of the rounded encoder
// with it (privacy.ReleasePlan.NoiseSensitivity). Row r is computed at
// the step of its last nonzero column.
func (e *exactPath) quantizeEncoder(c *mat.Dense, name string) error {
	m, n := c.Dims()
	maxC := maxAbsDense(c.RawMatrix().Data)
	if !(maxC > 0) || math.IsInf(maxC, 0) {
		return invalidf("mechanism %s: encoder has no finite nonzero entry", name)
	}
	_, exp := math.Frexp(maxC) // maxC < 2^exp
	e.encBits = math.MinInt
	for _, v := range c.RawMatrix().Data {
		if v != 0 {
			f, ex := math.Frexp(v)
			mant := uint64(math.Abs(math.Ldexp(f, 53)))
			e.encBits = max(e.encBits, 53-ex-bits.TrailingZeros64(mant))
		}
	}
	e.encBits = min(e.encBits, 40-exp)
	maxErr := 0.0 // |c~ 2^-encBits - C|, exact (Sterbenz) or 0
	e.enc = make([][]centry, m)
	e.rowStep = make([]int, m)
	e.rowsAt = make([][]int, n)
	for r := range m {
		last := 0
		for j, v := range c.RawRowView(r) {
			q := math.RoundToEven(math.Ldexp(v, e.encBits))
			maxErr = max(maxErr, math.Abs(math.Ldexp(q, -e.encBits)-v))
			if q != 0 {
				e.enc[r] = append(e.enc[r], centry{j, int64(q)})
				last = j + 1
			}
		}
		e.rowStep[r] = max(last, 1)
		e.rowsAt[e.rowStep[r]-1] = append(e.rowsAt[e.rowStep[r]-1], r)
	}
	e.maxErr = maxErr
	e.xLast = make([]int, n)
	for r, row := range e.enc {
		for _, ce := range row {
			e.xLast[ce.col] = max(e.xLast[ce.col], e.rowStep[r])
		}
	}
	return nil
}

// readDecoder keeps the decoder's structural nonzeros by row, refusing a
// decoder that reads an encoder row before it is computed (not causal).
func (e *exactPath) readDecoder(b *mat.Dense, name string) error {
	n, _ := b.Dims()
	cut := mfnoise.StructuralZeroCutoff(b)
	e.dec = make([][]dentry, n)
	e.yLast = make([]int, e.m)
	for t := range n {
		for r, v := range b.RawRowView(t) {
			if math.Abs(v) <= cut {
				continue
			}
			if e.rowStep[r] > t+1 {
				return invalidf("mechanism %s: its decoder reads at step %d the encoder row %d, which depends on step %d: the exact release needs a causal mechanism (tree-online rather than tree-full; mf-single, bandmf or blt rather than fft or fft-opt)",
					name, t+1, r+1, e.rowStep[r])
			}
			e.dec[t] = append(e.dec[t], dentry{r, v})
			e.yLast[r] = t + 1
		}
	}
	return nil
}

// livePeak is the peak number of live step sums and encoded rows, each D
// values of 8 bytes (16 on disk for Y).
func (e *exactPath) livePeak() int {
	n := len(e.rowsAt)
	live, peak := 0, 0
	xEnd, yEnd := make([]int, n+2), make([]int, n+2)
	for t := 1; t <= n; t++ {
		live++ // X~_t
		for _, r := range e.rowsAt[t-1] {
			live++
			yEnd[max(e.yLast[r], t)]++
		}
		xEnd[max(e.xLast[t-1], t)]++
		peak = max(peak, live)
		live -= xEnd[t] + yEnd[t]
	}
	return peak
}

// setGrid lays records of norm at most norm on the grid: rounding a
// coordinate moves it by at most 1/2 grid unit, so the norm grows by at
// most sqrt(Dim)/2 units, at most 2^-15 of the record norm's 2^gridBits
// units with this choice.
func (e *exactPath) setGrid(cfg Config, norm float64) {
	e.gridBits = gridBits(cfg.Dim)
	e.scale = math.Ldexp(1/cfg.Clip, e.gridBits)
	r := (norm*e.scale + 0.5*math.Sqrt(float64(cfg.Dim))) * (1 + 0x1p-40)
	e.norm2Max = uint64(math.Floor(r * r))
	e.normGrid = math.Sqrt(float64(e.norm2Max)) * (1 + 0x1p-40)
	e.unit = 1 / (math.Ldexp(1, e.encBits) * e.scale)
}

// lattice is the rounding of the exact path, for the planner.
func (e *exactPath) lattice() *privacy.Lattice {
	return &privacy.Lattice{EncoderBits: e.encBits, EncoderError: e.maxErr, GridBits: e.gridBits, NormGrid: e.normGrid}
}

// calibrate sets the noise of the exact path from the plan: the discrete
// Gaussian's sigma_Z = sigma * sensQ * normGrid * 2^encBits on the integer
// encoded sums, sensQ the plan's bound on the rounded encoder's
// sensitivity.
func (e *exactPath) calibrate(plan *privacy.ReleasePlan, seed *dpcore.Seed, wrap func(rowSource) rowSource) error {
	e.sensQ = plan.NoiseSensitivity
	e.sigmaZ = plan.NoiseMultiplier * e.sensQ * e.normGrid * math.Ldexp(1, e.encBits) * (1 + 0x1p-40)
	// The draws must fit the 128-bit encoded sums: |z| > 64 sigma_Z has
	// probability below e^-2048.
	if !(e.sigmaZ > 0 && e.sigmaZ <= 0x1p120) || !(e.noiseStd() > 0) || math.IsInf(e.noiseStd(), 0) {
		return invalidf("noise scale sigma_Z = %g grid units (%g in data units, noise multiplier %g, sensitivity %g): want a positive finite scale of at most 2^120 units",
			e.sigmaZ, e.noiseStd(), plan.NoiseMultiplier, e.sensQ)
	}
	src, err := noise.NewExactRows(e.m, e.dim, e.variance(), seed)
	if err != nil {
		return fmt.Errorf("aggregate: exact noise: %w", err)
	}
	e.noise = src
	if wrap != nil {
		e.noise = wrap(src)
	}
	return nil
}

// variance is sigmaZ^2 as an exact rational.
func (e *exactPath) variance() *big.Rat {
	s := new(big.Rat).SetFloat64(e.sigmaZ)
	return s.Mul(s, s)
}

func maxAbsDense(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = max(m, math.Abs(v))
	}
	return m
}

// noiseStd is the standard deviation scale of the noise of one coordinate
// of Y in data units (sigmaZ / (2^encBits * scale)).
func (e *exactPath) noiseStd() float64 { return e.sigmaZ * e.unit }

// quantize puts a clipped record of length D on the grid, with its squared
// norm at most norm2Max in exact integer arithmetic.
func (e *exactPath) quantize(rec []float64) []int64 {
	x := make([]int64, len(rec))
	var hi, lo uint64
	for i, v := range rec {
		x[i] = int64(math.RoundToEven(v * e.scale))
		h, l := bits.Mul64(uint64(abs64(x[i])), uint64(abs64(x[i])))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		hi += h + c
	}
	// Rounding can push the norm past the bound by a hair: move the
	// largest coordinate toward zero until it holds.
	for hi > 0 || lo > e.norm2Max {
		k := 0
		for i := range x {
			if abs64(x[i]) > abs64(x[k]) {
				k = i
			}
		}
		a := uint64(abs64(x[k]))
		var bw uint64
		lo, bw = bits.Sub64(lo, 2*a-1, 0) // a^2 - (a-1)^2
		hi -= bw
		if x[k] > 0 {
			x[k]--
		} else {
			x[k]++
		}
	}
	return x
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// addInto adds x to acc, or reports that a coordinate would overflow
// (leaving acc unchanged).
func addInto(acc, x []int64) bool {
	for i, v := range x {
		if (v > 0 && acc[i] > math.MaxInt64-v) || (v < 0 && acc[i] < math.MinInt64-v) {
			return false
		}
	}
	for i, v := range x {
		acc[i] += v
	}
	return true
}

// int128 is a signed 128-bit integer (two's complement in hi:lo).
type int128 struct {
	hi int64
	lo uint64
}

func (a *int128) mulAdd(x, y int64) {
	neg := (x < 0) != (y < 0)
	h, l := bits.Mul64(uint64(abs64(x)), uint64(abs64(y)))
	if neg { // negate h:l
		l = ^l + 1
		h = ^h
		if l == 0 {
			h++
		}
	}
	var c uint64
	a.lo, c = bits.Add64(a.lo, l, 0)
	a.hi += int64(h) + int64(c)
}

// add64 adds z to a, reporting false on overflow of 128 bits.
func (a *int128) add64(z int64) bool {
	h := int64(0)
	if z < 0 {
		h = -1
	}
	lo, c := bits.Add64(a.lo, uint64(z), 0)
	hi := a.hi + h + int64(c)
	if (a.hi >= 0) == (h >= 0) && (hi >= 0) != (a.hi >= 0) {
		return false
	}
	a.hi, a.lo = hi, lo
	return true
}

// addBig adds z to a, reporting false if z or the sum does not fit in
// 128 bits.
func (a *int128) addBig(z *big.Int) bool {
	if z.BitLen() > 127 {
		return false
	}
	var buf [16]byte
	z.FillBytes(buf[:]) // |z|, big-endian
	h, l := binary.BigEndian.Uint64(buf[:8]), binary.BigEndian.Uint64(buf[8:])
	if z.Sign() < 0 {
		l = ^l + 1
		h = ^h
		if l == 0 {
			h++
		}
	}
	var c uint64
	lo, c := bits.Add64(a.lo, l, 0)
	hi := a.hi + int64(h) + int64(c)
	// Signed overflow: both operands of one sign, the sum of the other.
	if (a.hi >= 0) == (int64(h) >= 0) && (hi >= 0) != (a.hi >= 0) {
		return false
	}
	a.hi, a.lo = hi, lo
	return true
}

func appendInt128(b []byte, a int128) []byte {
	b = binary.LittleEndian.AppendUint64(b, a.lo)
	return binary.LittleEndian.AppendUint64(b, uint64(a.hi))
}

func int128Float(b []byte) float64 {
	lo := binary.LittleEndian.Uint64(b)
	hi := binary.LittleEndian.Uint64(b[8:])
	neg := int64(hi) < 0
	if neg { // the magnitude, so that small negatives keep their digits
		lo = ^lo + 1
		hi = ^hi
		if lo == 0 {
			hi++
		}
	}
	f := float64(hi)*0x1p64 + float64(lo)
	if neg {
		return -f
	}
	return f
}

// storedVec is a store change of the exact path (nil body: delete).
type storedVec struct {
	bucket, key, body []byte
}

// commit computes the rows of step t from the step sum acc, returns
// theta_t (the decoder's row t applied to the exact Y, data units) and the
// store changes (new and dropped step sums and encoded rows).
func (e *exactPath) commit(t int, acc []int64) ([]float64, []storedVec, []storedVec, error) {
	var puts, dels []storedVec
	e.xs[t] = slices.Clone(acc)
	if e.xLast[t-1] > t {
		puts = append(puts, storedVec{bucketSteps, stepKey(t), seal(appendInts(nil, acc))})
	}
	rows, err := e.takeAhead(t)
	if err != nil {
		return nil, nil, nil, err
	}
	sum := make([]int128, e.dim)
	for k, r := range e.rowsAt[t-1] {
		clear(sum)
		for _, ce := range e.enc[r] {
			x := e.xs[ce.col+1]
			for i, v := range x {
				sum[i].mulAdd(ce.c, v)
			}
		}
		nz := rows[k]
		body := make([]byte, 0, 16*e.dim+4)
		y := make([]float64, e.dim)
		for i := range sum {
			ok := true
			if zi, isLarge := nz.large[i]; isLarge {
				ok = sum[i].addBig(zi)
			} else {
				ok = sum[i].add64(nz.small[i])
			}
			if !ok {
				return nil, nil, nil, fmt.Errorf("encoded row %d coordinate %d exceeds 128 bits", r+1, i)
			}
			body = appendInt128(body, sum[i])
			y[i] = int128Float(body[16*i:]) * e.unit
		}
		e.ys[r] = y
		if e.yLast[r] > t {
			puts = append(puts, storedVec{bucketEncoded, stepKey(r + 1), seal(body)})
		}
	}
	theta := make([]float64, e.dim)
	for _, de := range e.dec[t-1] {
		for i, v := range e.ys[de.row] {
			theta[i] += de.b * v
		}
	}
	for j := range e.xs {
		if e.xLast[j-1] <= t {
			delete(e.xs, j)
			if j != t {
				dels = append(dels, storedVec{bucket: bucketSteps, key: stepKey(j)})
			}
		}
	}
	for r := range e.ys {
		if e.yLast[r] <= t {
			delete(e.ys, r)
			if e.rowStep[r] != t {
				dels = append(dels, storedVec{bucket: bucketEncoded, key: stepKey(r + 1)})
			}
		}
	}
	return theta, puts, dels, nil
}

// drawAhead starts drawing the noise rows of step t (none past the
// horizon) in the background. It is called when step t-1 has been released
// and stored, or when the store opens at t-1 releases, so the rows are
// drawn before any of step t's contributions arrive and off the path of
// its release: the exact sampler's time depends on |z|, and a release
// minus its data is the noise (docs/math.md). The store's noise state is
// the stream's before these rows: a reopened store draws them again, the
// same.
func (e *exactPath) drawAhead(t int) {
	if t > len(e.rowsAt) {
		e.ahead = nil
		return
	}
	p := &aheadRows{step: t, done: make(chan struct{})}
	e.ahead = p
	n := len(e.rowsAt[t-1])
	go func() {
		defer close(p.done)
		z := make([]*big.Int, e.dim)
		rows := make([]noiseRow, n)
		for k := range rows {
			if err := e.noise.Next(z); err != nil {
				p.err = fmt.Errorf("aggregate: exact noise of step %d: %w", t, err)
				return
			}
			rows[k].small = make([]int64, e.dim)
			for i, v := range z {
				if v.IsInt64() {
					rows[k].small[i] = v.Int64()
				} else {
					if rows[k].large == nil {
						rows[k].large = map[int]*big.Int{}
					}
					rows[k].large[i] = new(big.Int).Set(v)
				}
			}
		}
		p.rows = rows
	}()
}

// takeAhead returns the noise rows of step t drawn ahead, waiting for
// the draw only if it has not finished yet (a commit right after the
// previous one).
func (e *exactPath) takeAhead(t int) ([]noiseRow, error) {
	p := e.ahead
	if p == nil || p.step != t {
		return nil, fmt.Errorf("aggregate: no noise drawn ahead for step %d", t)
	}
	<-p.done
	e.ahead = nil
	return p.rows, p.err
}

// waitAhead waits for a draw in progress (the noise stream is not to be
// read or closed while it runs).
func (e *exactPath) waitAhead() {
	if e.ahead != nil {
		<-e.ahead.done
	}
}

func appendInts(b []byte, x []int64) []byte {
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// rowsThrough is the number of encoder rows computed by step t.
func (e *exactPath) rowsThrough(t int) int {
	k := 0
	for s := 1; s <= t; s++ {
		k += len(e.rowsAt[s-1])
	}
	return k
}

// load restores the live step sums and encoded rows after released steps.
func (e *exactPath) load(tx *bolt.Tx, released int) error {
	if e.noise.Step() != e.rowsThrough(released) {
		return fmt.Errorf("aggregate: %w: exact noise state has %d rows but %d releases need %d", errCorrupt, e.noise.Step(), released, e.rowsThrough(released))
	}
	sb, eb := tx.Bucket(bucketSteps), tx.Bucket(bucketEncoded)
	for t := 1; t <= released; t++ {
		if e.xLast[t-1] <= released {
			continue
		}
		body, err := unseal(fmt.Sprintf("step sum %d", t), sb.Get(stepKey(t)))
		if err != nil {
			return err
		}
		if len(body) != 8*e.dim {
			return fmt.Errorf("aggregate: step sum %d: %w", t, errCorrupt)
		}
		x := make([]int64, e.dim)
		for i := range x {
			x[i] = int64(binary.LittleEndian.Uint64(body[8*i:]))
		}
		e.xs[t] = x
	}
	for r := range e.m {
		if e.rowStep[r] > released || e.yLast[r] <= released {
			continue
		}
		body, err := unseal(fmt.Sprintf("encoded row %d", r+1), eb.Get(stepKey(r+1)))
		if err != nil {
			return err
		}
		if len(body) != 16*e.dim {
			return fmt.Errorf("aggregate: encoded row %d: %w", r+1, errCorrupt)
		}
		y := make([]float64, e.dim)
		for i := range y {
			y[i] = int128Float(body[16*i:]) * e.unit
		}
		e.ys[r] = y
	}
	return nil
}

// seededNoise returns theta_t's noise part for steps 1..t (data units), by
// redrawing the rows from the seed: what the releases hold beyond the
// decoded contributions.
func (e *exactPath) seededNoise(seed *dpcore.Seed, t int) ([][]float64, error) {
	src, err := noise.NewExactRows(e.m, e.dim, e.variance(), seed)
	if err != nil {
		return nil, err
	}
	zs := map[int][]float64{}
	z := make([]*big.Int, e.dim)
	out := make([][]float64, t)
	for s := 1; s <= t; s++ {
		for _, r := range e.rowsAt[s-1] {
			if err := src.Next(z); err != nil {
				return nil, err
			}
			v := make([]float64, e.dim)
			for i := range v {
				f, _ := new(big.Float).SetInt(z[i]).Float64()
				v[i] = f * e.unit
			}
			zs[r] = v
		}
		out[s-1] = make([]float64, e.dim)
		for _, de := range e.dec[s-1] {
			for i, v := range zs[de.row] {
				out[s-1][i] += de.b * v
			}
		}
	}
	return out, nil
}
