package privacy

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// Mechanism is what the planner accepts: a correlated-noise mechanism, a
// value that builds its strategy A = B C for the run's workload (SPEC 5)
// and declares the Structure the privacy rules read. The families are the
// types of package mfnoise (DPSGD, Tree, FFT, MFSingle, MFKB, BandMF,
// Sqrt, BandedSqrt, BandedToeplitz, BLT, BISR, Stamped); a caller's own
// factorization is a CustomFactorization. The planner never inspects a
// name. It is mfnoise.Mechanism itself: one interface, named where the
// planner's callers look for it.
type Mechanism = mfnoise.Mechanism

// samplingFor is the sampling a mechanism is run with when the caller does
// not choose: Poisson for independent noise, partitioned band sampling for
// a banded encoder with more than one band, fixed-order epochs otherwise.
// bandmf:auto and toeplitz:auto start from band sampling and then take
// the regime whose own band choice adds the less noise (chooseSampling).
func samplingFor(s mfnoise.Structure) Sampling {
	switch {
	case s.Independent:
		return SamplingPoisson
	case s.Bands > 1 || s.AutoBands:
		return SamplingBandPoisson
	}
	return SamplingFixedOrder
}

// CustomFactorization is a caller's own factorization (an
// mfnoise.Factorization) used as a mechanism, as given. Bands
// declares its encoder banded (0: dense or tall); the planner verifies the
// declaration before relying on it.
type CustomFactorization struct {
	Name  string
	F     *mfnoise.Factorization
	Bands int
}

func (m CustomFactorization) String() string {
	if m.Name != "" {
		return m.Name
	}
	return "custom"
}

// Structure is the declared band count.
func (m CustomFactorization) Structure() mfnoise.Structure { return mfnoise.Structure{Bands: m.Bands} }

// Build returns the caller's factorization after checking that it
// factorizes w and that a declared band count holds.
func (m CustomFactorization) Build(_ context.Context, w dpcore.Workload, _ dpcore.Schema, _ mfnoise.BuildOptions) (dpcore.Strategy, error) {
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
		if got, err := mfnoise.EncoderBands(m.F); err != nil || got == 0 || got > m.Bands {
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

// family is one line of the table of names: the family's name, the
// syntax its help shows, and how its ":N" argument (if any) makes the
// typed value.
type family struct {
	name, syntax string
	parse        func(countArg) (Mechanism, error)
}

// families is the one table of mechanism names. A new mechanism is one
// line here.
func families() []family {
	return []family{
		{"dpsgd", "dpsgd", plain(mfnoise.DPSGD{})},
		{"tree-online", "tree-online", plain(mfnoise.Tree{Decoder: mfnoise.TreeOnline})},
		{"tree-full", "tree-full", plain(mfnoise.Tree{Decoder: mfnoise.TreeFull})},
		{"fft", "fft", plain(mfnoise.FFT{Decoder: mfnoise.FFTAlgorithm1})},
		{"fft-opt", "fft-opt", plain(mfnoise.FFT{Decoder: mfnoise.FFTOptimal})},
		{"mf-single", "mf-single", plain(mfnoise.MFSingle{})},
		{"mf-kb", "mf-kb", plain(mfnoise.MFKB{})},
		{"bandmf", "bandmf:BANDS or bandmf:auto", banded(func(b int, auto bool) Mechanism { return mfnoise.BandMF{Bands: b, Auto: auto} })},
		{"sqrt", "sqrt", plain(mfnoise.Sqrt{})},
		{"toeplitz", "toeplitz:BANDS or toeplitz:auto", banded(func(b int, auto bool) Mechanism { return mfnoise.BandedToeplitz{Bands: b, Auto: auto} })},
		{"blt", "blt:NBUF", counted("buffer count", 32, func(b int) Mechanism { return mfnoise.BLT{Buffers: b} })},
		{"bisr", "bisr:BANDS", counted("band count", 0, func(b int) Mechanism { return mfnoise.BISR{Bands: b} })},
		{"bsr", "bsr:BANDS", counted("band count", 0, func(b int) Mechanism { return mfnoise.BandedSqrt{Bands: b} })},
	}
}

// MechanismNames lists the mechanism names ParseMechanism reads, for
// command-line help and errors.
func MechanismNames() string {
	var names []string
	for _, f := range families() {
		names = append(names, f.syntax)
	}
	return strings.Join(names, ", ") + "; the dense ones (dpsgd to bandmf:BANDS) optionally /sS for S stamps"
}

// ParseMechanism turns a command-line mechanism name into a Mechanism: the
// one parser of names, used by command lines and the service (the library
// passes typed values). A name is one of dpsgd, tree-online, tree-full,
// fft, fft-opt, mf-single, mf-kb, bandmf:BANDS (BANDS an integer or
// "auto"), each optionally followed by /sS for S stamps, e.g.
// "tree-full/s5"; or one of the Toeplitz mechanisms sqrt, toeplitz:BANDS
// (BANDS an integer or "auto"), blt:NBUF, bisr:BANDS, bsr:BANDS (not
// stamped).
func ParseMechanism(s string) (Mechanism, error) {
	name := strings.TrimSpace(s)
	base, suffix, hasStamps := strings.Cut(name, "/")
	stamps := 1
	if hasStamps {
		digits, ok := strings.CutPrefix(suffix, "s")
		v, err := strconv.Atoi(digits)
		if !ok || err != nil || v < 1 {
			return nil, invalidf("mechanism %q: stamp suffix %q, want /sS with S a positive integer", name, "/"+suffix)
		}
		stamps = v
	}
	kind, arg, hasArg := strings.Cut(base, ":")
	var parse func(countArg) (Mechanism, error)
	for _, f := range families() {
		if f.name == kind {
			parse = f.parse
		}
	}
	if parse == nil {
		return nil, invalidf("unknown mechanism %q (known: %s)", name, MechanismNames())
	}
	m, err := parse(countArg{name: name, kind: kind, arg: arg, has: hasArg})
	if err != nil {
		return nil, err
	}
	if stamps == 1 {
		return m, nil
	}
	inner, ok := m.(mfnoise.Blocked)
	switch {
	case m.Structure().AutoBands:
		return nil, invalidf("%s: %s cannot be stamped (the planner chooses its bands)", name, m)
	case !ok:
		return nil, invalidf("mechanism %q: %s is not stamped (its Toeplitz structure already streams in O(n) memory)", name, kind)
	}
	return mfnoise.Stamped{Inner: inner, Stamps: stamps}, nil
}

// countArg is the ":N" argument of a mechanism name.
type countArg struct {
	name, kind, arg string
	has             bool
}

// plain parses a family without an argument.
func plain(m Mechanism) func(countArg) (Mechanism, error) {
	return func(a countArg) (Mechanism, error) {
		if a.has {
			return nil, invalidf("mechanism %q: %s takes no :N argument", a.name, a.kind)
		}
		return m, nil
	}
}

// counted parses a family with a positive integer argument, at most limit
// (0: no limit).
func counted(what string, limit int, mk func(int) Mechanism) func(countArg) (Mechanism, error) {
	return func(a countArg) (Mechanism, error) {
		v, err := strconv.Atoi(a.arg)
		if !a.has || err != nil || v < 1 {
			return nil, invalidf("mechanism %q: %s needs a positive integer %s, e.g. %s:4", a.name, a.kind, what, a.kind)
		}
		if limit > 0 && v > limit {
			return nil, invalidf("mechanism %q: %d buffers, at most %d", a.name, v, limit)
		}
		return mk(v), nil
	}
}

// banded parses a family with a band count or "auto".
func banded(mk func(bands int, auto bool) Mechanism) func(countArg) (Mechanism, error) {
	return func(a countArg) (Mechanism, error) {
		if a.arg == "auto" {
			return mk(0, true), nil
		}
		v, err := strconv.Atoi(a.arg)
		if !a.has || err != nil || v < 1 {
			return nil, invalidf("mechanism %q: %s needs a positive integer band count or auto, e.g. %s:8 or %s:auto", a.name, a.kind, a.kind, a.kind)
		}
		return mk(v, false), nil
	}
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

// DefaultMechanism is the mechanism of a run that names none: DP-SGD
// (mfnoise.DPSGD), independent noise.
func DefaultMechanism() Mechanism { return mfnoise.DPSGD{} }
