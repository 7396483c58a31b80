package privacy

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// Mechanism is a correlated-noise mechanism: a factorization A = B C of the
// workload whose encoder C shapes the noise (SPEC 5). A new mechanism plugs
// into the planner by implementing it; the planner never inspects its name.
//
// A Mechanism is an mfnoise.Mechanism, so mfnoise.Compare scores any of
// them, a caller's Factorization included, next to the built-in ones. The
// built-in types are also mfnoise.Builtin: Compare scores those with
// Toeplitz or tree structure without dense n x n matrices.
type Mechanism interface {
	// String is the mechanism's canonical name, e.g. "bandmf:8/s2", and
	// Factorize builds the factorization for workload w; schema is the
	// participation the sampler realizes (optimizers may read it).
	mfnoise.Mechanism
	// Structure is what the privacy rules rely on, known without reading
	// the encoder.
	Structure() Structure
}

// ToeplitzMechanism is a mechanism whose encoder is lower-triangular
// Toeplitz (DP-SGD, sqrt, toeplitz:BANDS, blt:NBUF, bisr:BANDS). The
// planner works on its O(n) description: sensitivity, loss and the
// streamed noise (noise.NewToeplitz) need no n x n matrix, so a run is
// not limited to mfnoise.DenseStepLimit steps.
type ToeplitzMechanism interface {
	Mechanism
	// BuildToeplitz builds the mechanism for workload w in O(n) memory.
	BuildToeplitz(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Toeplitz, error)
}

// Structure is the part of a mechanism the planner's rules read.
type Structure struct {
	// Independent says C = I: DP-SGD's independent noise. The encoder does
	// not depend on the workload, so the planner factorizes prefix sums.
	Independent bool
	// Bands is b for an encoder that is square, lower triangular and
	// b-banded (C[i,j] = 0 for i-j >= b; 1 for DP-SGD), 0 for a dense or
	// tall one. Only a banded encoder can be accounted with amplification
	// (banded-MF Thm 4), and only with at least b partitions.
	Bands int
	// AutoBands says the encoder is banded with a band count the planner
	// chooses by amplified accounting (bandmf:auto).
	AutoBands bool
	// FixedOrderOnly says the encoder was optimized for (k,b)-participation,
	// which only fixed-order epochs realize.
	FixedOrderOnly bool
}

// Sampling is the sampling a mechanism is run with when the caller does
// not choose: Poisson for independent noise, partitioned band sampling for a
// banded encoder with more than one band, fixed-order epochs otherwise.
func (s Structure) Sampling() Sampling {
	switch {
	case s.Independent:
		return SamplingPoisson
	case s.Bands > 1 || s.AutoBands:
		return SamplingBandPoisson
	}
	return SamplingFixedOrder
}

// DPSGD is independent noise, C = I (Abadi et al. 2016).
type DPSGD struct{}

// Tree is the binary-tree mechanism with an online (Honaker from below,
// with completion) or the optimal (full Honaker) decoder.
type Tree struct{ Decoder mfnoise.TreeDecoder }

// FFT is the FFT mechanism with the Algorithm-1 or the optimal decoder
// (multi-epoch paper Alg. 1, App. K).
type FFT struct{ Decoder mfnoise.FFTDecoder }

// MFSingle is the optimal single-participation factorization (Denisov et
// al. 2022).
type MFSingle struct{}

// MFKB is the optimal factorization for the sampler's (k,b)-participation
// (multi-epoch paper); only fixed-order epochs realize that schema.
type MFKB struct{}

// BandMF is banded matrix factorization with Bands bands (banded-MF), or
// with Auto, the band count the planner picks by amplified accounting
// (banded-MF App. F.4).
type BandMF struct {
	Bands int
	Auto  bool
}

// Stamped runs Inner on blocks of n/Stamps steps (the stamping
// construction, SPEC 5): a block-diagonal encoder.
type Stamped struct {
	Inner  Mechanism
	Stamps int
}

// Factorization is a caller's own factorization, used as given. Bands
// declares its encoder banded (0: dense or tall); the planner verifies the
// declaration before relying on it.
type Factorization struct {
	Name  string
	F     *mfnoise.Factorization
	Bands int
}

// The names of the built-in mechanisms are those ParseMechanism reads.

func (DPSGD) String() string    { return mfnoise.KindDPSGD }
func (MFSingle) String() string { return mfnoise.KindMFSingle }
func (MFKB) String() string     { return mfnoise.KindMFKB }
func (m Tree) String() string {
	if m.Decoder == mfnoise.TreeFull {
		return mfnoise.KindTreeFull
	}
	return mfnoise.KindTreeOnline
}
func (m FFT) String() string {
	if m.Decoder == mfnoise.FFTOptimal {
		return mfnoise.KindFFTOpt
	}
	return mfnoise.KindFFT
}
func (m BandMF) String() string {
	if m.Auto {
		return mfnoise.KindBandMF + ":auto"
	}
	return mfnoise.KindBandMF + ":" + strconv.Itoa(m.Bands)
}
func (m Stamped) String() string {
	if m.Inner == nil {
		return "<nil>/s" + strconv.Itoa(m.Stamps)
	}
	return m.Inner.String() + "/s" + strconv.Itoa(m.Stamps)
}
func (m Factorization) String() string {
	if m.Name != "" {
		return m.Name
	}
	return "custom"
}

// The structures of the built-in mechanisms: DP-SGD is independent and
// 1-banded, BandMF b-banded, MF-KB fixed-order only, trees, FFT and
// single-participation MF dense or tall.

func (DPSGD) Structure() Structure    { return Structure{Independent: true, Bands: 1} }
func (Tree) Structure() Structure     { return Structure{} }
func (FFT) Structure() Structure      { return Structure{} }
func (MFSingle) Structure() Structure { return Structure{} }
func (MFKB) Structure() Structure     { return Structure{FixedOrderOnly: true} }
func (m BandMF) Structure() Structure {
	if m.Auto {
		return Structure{AutoBands: true}
	}
	return Structure{Bands: m.Bands}
}

// Structure of a stamped mechanism is its inner one's: a block-diagonal
// of b-banded blocks is b-banded.
func (m Stamped) Structure() Structure {
	if m.Inner == nil {
		return Structure{}
	}
	return m.Inner.Structure()
}
func (m Factorization) Structure() Structure { return Structure{Bands: m.Bands} }

// spec is the mfnoise name of a built-in mechanism, stamped stamps times.
// bandmf:auto is kept as mfnoise's AutoBands (b bands under (k,b) and
// min-sep, n under single participation): the band count Compare scores
// it with, having no sampling to amplify.
func spec(m Mechanism, stamps int) (mfnoise.MechanismSpec, error) {
	s := mfnoise.MechanismSpec{Name: m.String(), Stamps: stamps}
	if stamps > 1 {
		s.Name += "/s" + strconv.Itoa(stamps)
	}
	switch m := m.(type) {
	case DPSGD:
		s.Kind = mfnoise.KindDPSGD
	case Tree:
		s.Kind = mfnoise.KindTreeOnline
		if m.Decoder == mfnoise.TreeFull {
			s.Kind = mfnoise.KindTreeFull
		}
	case FFT:
		s.Kind = mfnoise.KindFFT
		if m.Decoder == mfnoise.FFTOptimal {
			s.Kind = mfnoise.KindFFTOpt
		}
	case MFSingle:
		s.Kind = mfnoise.KindMFSingle
	case MFKB:
		s.Kind = mfnoise.KindMFKB
	case BandMF:
		if m.Auto && stamps > 1 {
			return s, invalidf("%s: bandmf:auto cannot be stamped", s.Name)
		}
		s.Kind, s.Bands, s.AutoBands = mfnoise.KindBandMF, m.Bands, m.Auto
	default:
		return s, invalidf("mechanism %v (%T) cannot be stamped: only the built-in mechanisms can", m, m)
	}
	return s, nil
}

// buildBuiltin builds a built-in mechanism through mfnoise.Build.
func buildBuiltin(ctx context.Context, m mfnoise.Builtin, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	s, err := m.BuiltinSpec()
	if err != nil {
		return nil, err
	}
	if s.AutoBands {
		return nil, invalidf("bandmf:auto: the band count is chosen by the planner (NewPlan), not by Factorize")
	}
	return mfnoise.Build(ctx, s, w, schema, opt)
}

// BuiltinSpec makes DPSGD an mfnoise.Builtin.
func (m DPSGD) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes Tree an mfnoise.Builtin.
func (m Tree) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes FFT an mfnoise.Builtin.
func (m FFT) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes MFSingle an mfnoise.Builtin.
func (m MFSingle) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes MFKB an mfnoise.Builtin.
func (m MFKB) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes BandMF an mfnoise.Builtin; with Auto, Compare uses
// mfnoise's unamplified band count (see mfnoise.Build).
func (m BandMF) BuiltinSpec() (mfnoise.MechanismSpec, error) { return spec(m, 1) }

// BuiltinSpec makes Stamped an mfnoise.Builtin.
func (m Stamped) BuiltinSpec() (mfnoise.MechanismSpec, error) {
	if m.Stamps < 1 {
		return mfnoise.MechanismSpec{}, invalidf("%v: stamps = %d must be positive", m, m.Stamps)
	}
	if m.Inner == nil {
		return mfnoise.MechanismSpec{}, invalidf("stamped mechanism without an inner mechanism")
	}
	return spec(m.Inner, m.Stamps)
}

// Factorize builds C = I for w.
func (m DPSGD) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// BuildToeplitz is C = I as the Toeplitz encoder with c = (1).
func (DPSGD) BuildToeplitz(_ context.Context, w mfnoise.Workload, _ mfnoise.Schema, _ mfnoise.BuildOptions) (*mfnoise.Toeplitz, error) {
	return mfnoise.NewToeplitz(mfnoise.KindDPSGD, w.N, []float64{1})
}

// Factorize builds the tree mechanism for w.
func (m Tree) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize builds the FFT mechanism for w.
func (m FFT) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize optimizes for single participation.
func (m MFSingle) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize optimizes for schema.
func (m MFKB) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize optimizes a Bands-banded encoder.
func (m BandMF) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize stamps the inner mechanism.
func (m Stamped) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return buildBuiltin(ctx, m, w, schema, opt)
}

// Factorize returns the caller's factorization after checking that it
// factorizes w and that a declared band count holds.
func (m Factorization) Factorize(_ context.Context, w mfnoise.Workload, _ mfnoise.Schema, _ mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	if m.F == nil {
		return nil, invalidf("%v: no factorization", m)
	}
	// Compare the sizes before building either workload matrix.
	if m.F.N() != w.N {
		return nil, invalidf("%v factorizes %d steps, but the run has %d", m, m.F.N(), w.N)
	}
	a, err := w.Matrix()
	if err != nil {
		return nil, fmt.Errorf("privacy: %v: %w", m, err)
	}
	fa, err := m.F.Workload.Matrix()
	if err != nil {
		return nil, fmt.Errorf("privacy: %v: %w", m, err)
	}
	if !mat.EqualApprox(a, fa, 1e-12) {
		return nil, invalidf("%v factorizes %v, but the run's workload is %v", m, m.F.Workload, w)
	}
	if m.Bands > 0 {
		if got := bandsOf(m.F.Encoder); got == 0 || got > m.Bands {
			return nil, invalidf("%v declares %d bands, but its encoder is not %d-banded", m, m.Bands, m.Bands)
		}
		if m.F.Meta.Bands == 0 {
			// The factorization carries the verified structure (Compare
			// costs its noise as banded).
			f := *m.F
			f.Meta.Bands = m.Bands
			return &f, nil
		}
	}
	return m.F, nil
}

// bandsOf is the band count of a square lower-triangular encoder, 0 if C
// is tall or not lower triangular. It verifies a caller's declaration.
func bandsOf(c *mat.Dense) int {
	r, n := c.Dims()
	if r != n {
		return 0
	}
	b := 1
	for i := 0; i < n; i++ {
		for j, v := range c.RawRowView(i) {
			if v == 0 {
				continue
			}
			if j > i {
				return 0
			}
			b = max(b, i-j+1)
		}
	}
	return b
}

// ParseMechanism turns a command-line mechanism name (mfnoise.ParseMechanism:
// dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb,
// bandmf:BANDS or bandmf:auto, each optionally /sS) into a Mechanism. Only
// command lines parse names; the library passes typed values.
func ParseMechanism(name string) (Mechanism, error) {
	s, err := mfnoise.ParseMechanism(name)
	if err != nil {
		return nil, err // it names the package and the mechanism
	}
	return FromSpec(s)
}

// ParseMechanisms parses a comma-separated list of mechanism names with
// ParseMechanism, the one parser of names: "train compare -mechanisms"
// accepts exactly the names "train run -mechanism" does.
func ParseMechanisms(list string) ([]Mechanism, error) {
	if strings.TrimSpace(list) == "" {
		return nil, invalidf("empty mechanism list")
	}
	var ms []Mechanism
	for i, item := range strings.Split(list, ",") {
		if strings.TrimSpace(item) == "" {
			return nil, invalidf("mechanism list %q: entry %d is empty", list, i+1)
		}
		// Errors from ParseMechanism already name the entry.
		m, err := ParseMechanism(item)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// FromSpec is the Mechanism of a parsed mfnoise name.
func FromSpec(s mfnoise.MechanismSpec) (Mechanism, error) {
	var m Mechanism
	switch s.Kind {
	case mfnoise.KindDPSGD:
		m = DPSGD{}
	case mfnoise.KindTreeOnline:
		m = Tree{Decoder: mfnoise.TreeOnline}
	case mfnoise.KindTreeFull:
		m = Tree{Decoder: mfnoise.TreeFull}
	case mfnoise.KindFFT:
		m = FFT{Decoder: mfnoise.FFTAlgorithm1}
	case mfnoise.KindFFTOpt:
		m = FFT{Decoder: mfnoise.FFTOptimal}
	case mfnoise.KindMFSingle:
		m = MFSingle{}
	case mfnoise.KindMFKB:
		m = MFKB{}
	case mfnoise.KindBandMF:
		m = BandMF{Bands: s.Bands, Auto: s.AutoBands}
	case mfnoise.KindSqrt, mfnoise.KindToeplitz, mfnoise.KindBLT, mfnoise.KindBISR:
		t := s
		t.Stamps = 1
		m = Toeplitz{Spec: t}
	default:
		// A kind mfnoise builds but the planner has no type for: no
		// structure is assumed, so it is accounted without amplification.
		m = built{spec: s}
		s.Stamps = 1
	}
	if s.Stamps > 1 {
		if _, ok := m.(BandMF); ok && s.AutoBands {
			return nil, invalidf("%s: bandmf:auto cannot be stamped", s.Name)
		}
		m = Stamped{Inner: m, Stamps: s.Stamps}
	}
	return m, nil
}

// Toeplitz is a Toeplitz-structured mechanism of package mfnoise: the
// square root of the prefix sum (sqrt), banded Toeplitz (toeplitz:BANDS,
// whose encoder is banded, so band sampling and amplified accounting
// apply; toeplitz:auto, whose band count the planner chooses as for
// bandmf:auto), buffered linear Toeplitz (blt:NBUF) and the banded inverse square
// root (bisr:BANDS, whose encoder's inverse is banded, not the encoder).
type Toeplitz struct{ Spec mfnoise.MechanismSpec }

func (m Toeplitz) String() string { return m.Spec.String() }

// Structure: only toeplitz:BANDS declares a banded encoder; toeplitz:auto
// one whose band count the planner chooses by amplified accounting.
func (m Toeplitz) Structure() Structure {
	if m.Spec.Kind == mfnoise.KindToeplitz {
		if m.Spec.AutoBands {
			return Structure{AutoBands: true}
		}
		return Structure{Bands: m.Spec.Bands}
	}
	return Structure{}
}

// BuildToeplitz builds the mechanism through mfnoise.BuildToeplitz.
func (m Toeplitz) BuildToeplitz(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Toeplitz, error) {
	return mfnoise.BuildToeplitz(ctx, m.Spec, w, schema, opt)
}

// BuiltinSpec makes Toeplitz an mfnoise.Builtin: Compare scores it from
// its coefficients in O(n) memory.
func (m Toeplitz) BuiltinSpec() (mfnoise.MechanismSpec, error) { return m.Spec, nil }

// Factorize builds the mechanism through mfnoise.Build.
func (m Toeplitz) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return mfnoise.Build(ctx, m.Spec, w, schema, opt)
}

// built is a mechanism mfnoise.Build knows by name and the planner has no
// type for; it is assumed to have no exploitable structure.
type built struct{ spec mfnoise.MechanismSpec }

func (m built) String() string       { return m.spec.String() }
func (m built) Structure() Structure { return Structure{} }
func (m built) BuiltinSpec() (mfnoise.MechanismSpec, error) {
	return m.spec, nil
}
func (m built) Factorize(ctx context.Context, w mfnoise.Workload, schema mfnoise.Schema, opt mfnoise.BuildOptions) (*mfnoise.Factorization, error) {
	return mfnoise.Build(ctx, m.spec, w, schema, opt)
}
