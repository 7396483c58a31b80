package mfnoise

import (
	"strconv"
	"strings"
)

// Mechanism kinds accepted by ParseMechanism and Build.
const (
	KindDPSGD      = "dpsgd"       // C = I
	KindTreeOnline = "tree-online" // binary tree, online decoder with completion
	KindTreeFull   = "tree-full"   // binary tree, optimal (full Honaker) decoder
	KindFFT        = "fft"         // FFT mechanism, Algorithm-1 decoder
	KindFFTOpt     = "fft-opt"     // FFT encoder, optimal decoder
	KindMFSingle   = "mf-single"   // optimal single-participation MF
	KindMFKB       = "mf-kb"       // optimal (k,b)-participation MF
	KindBandMF     = "bandmf"      // banded MF
	KindSqrt       = "sqrt"        // Toeplitz square root of the prefix sum
	KindToeplitz   = "toeplitz"    // banded Toeplitz, optimized coefficients
	KindBLT        = "blt"         // buffered linear Toeplitz, optimized
	KindBISR       = "bisr"        // banded inverse square root
)

// toeplitzKinds are the kinds built as Toeplitz mechanisms, in O(n) memory
// (DP-SGD is the Toeplitz encoder c = (1)).
func toeplitzKind(kind string) bool {
	switch kind {
	case KindDPSGD, KindSqrt, KindToeplitz, KindBLT, KindBISR:
		return true
	}
	return false
}

// MechanismNames lists the mechanism names ParseMechanism reads, for
// command-line help and errors.
const MechanismNames = "dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb, bandmf:BANDS or bandmf:auto, each optionally /sS (S stamps); sqrt, toeplitz:BANDS or toeplitz:auto, blt:NBUF, bisr:BANDS"

// MechanismSpec is a parsed mechanism name, the CLI contract: one of
// dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb,
// bandmf:BANDS (BANDS an integer or "auto"), each optionally followed by
// /sS for S stamps, e.g. "tree-full/s5" or "bandmf:auto/s2"; or one of the
// Toeplitz mechanisms sqrt, toeplitz:BANDS (BANDS an integer or "auto"),
// blt:NBUF, bisr:BANDS (not stamped).
type MechanismSpec struct {
	// Name is the text as given (trimmed), for error messages; Compare
	// reports the canonical String.
	Name string `json:"name"`
	// Kind is one of the Kind constants, e.g. KindTreeFull.
	Kind string `json:"kind"`
	// Bands is the band count of bandmf and toeplitz (0 with AutoBands:
	// bandmf:auto, toeplitz:auto).
	Bands     int  `json:"bands,omitempty"`
	AutoBands bool `json:"auto_bands,omitempty"`
	// Buffers is the buffer count of blt.
	Buffers int `json:"buffers,omitempty"`
	// Stamps is the number of stamped copies; 1 means not stamped.
	Stamps int `json:"stamps"`
}

// String is the canonical name, e.g. "bandmf:8/s2".
func (s MechanismSpec) String() string {
	name := s.Kind
	if s.Kind == KindBISR {
		name += ":" + strconv.Itoa(s.Bands)
	}
	if s.Kind == KindBLT {
		name += ":" + strconv.Itoa(s.Buffers)
	}
	if s.Kind == KindBandMF || s.Kind == KindToeplitz {
		if s.AutoBands {
			name += ":auto"
		} else {
			name += ":" + strconv.Itoa(s.Bands)
		}
	}
	if s.Stamps > 1 {
		name += "/s" + strconv.Itoa(s.Stamps)
	}
	return name
}

// ParseMechanism parses one mechanism name (see MechanismSpec).
func ParseMechanism(s string) (MechanismSpec, error) {
	name := strings.TrimSpace(s)
	spec := MechanismSpec{Name: name, Stamps: 1}
	base, stamps, hasStamps := strings.Cut(name, "/")
	if hasStamps {
		digits, ok := strings.CutPrefix(stamps, "s")
		v, err := strconv.Atoi(digits)
		if !ok || err != nil || v < 1 {
			return MechanismSpec{}, invalidf("mechanism %q: stamp suffix %q, want /sS with S a positive integer", name, "/"+stamps)
		}
		spec.Stamps = v
	}
	kind, bands, hasBands := strings.Cut(base, ":")
	spec.Kind = kind
	switch kind {
	case KindDPSGD, KindTreeOnline, KindTreeFull, KindFFT, KindFFTOpt, KindMFSingle, KindMFKB, KindSqrt:
		if hasBands {
			return MechanismSpec{}, invalidf("mechanism %q: only bandmf, toeplitz, blt and bisr take a :N argument", name)
		}
	case KindToeplitz, KindBLT, KindBISR:
		what := map[string]string{KindToeplitz: "band count", KindBISR: "band count", KindBLT: "buffer count"}[kind]
		if kind == KindToeplitz && bands == "auto" {
			spec.AutoBands = true
			break
		}
		v, err := strconv.Atoi(bands)
		if !hasBands || err != nil || v < 1 {
			if kind == KindToeplitz {
				return MechanismSpec{}, invalidf("mechanism %q: toeplitz needs a positive integer band count or auto, e.g. toeplitz:4 or toeplitz:auto", name)
			}
			return MechanismSpec{}, invalidf("mechanism %q: %s needs a positive integer %s, e.g. %s:4", name, kind, what, kind)
		}
		if kind == KindBLT {
			if v > 32 {
				return MechanismSpec{}, invalidf("mechanism %q: %d buffers, at most 32", name, v)
			}
			spec.Buffers = v
			break
		}
		spec.Bands = v
	case KindBandMF:
		if !hasBands {
			return MechanismSpec{}, invalidf("mechanism %q: bandmf needs a band count, e.g. bandmf:8 or bandmf:auto", name)
		}
		if bands == "auto" {
			spec.AutoBands = true
			break
		}
		v, err := strconv.Atoi(bands)
		if err != nil || v < 1 {
			return MechanismSpec{}, invalidf("mechanism %q: band count %q, want a positive integer or auto", name, bands)
		}
		spec.Bands = v
	default:
		return MechanismSpec{}, invalidf("unknown mechanism %q (known: %s)", name, MechanismNames)
	}
	if spec.Stamps > 1 && toeplitzKind(kind) && kind != KindDPSGD {
		return MechanismSpec{}, invalidf("mechanism %q: %s is not stamped (its Toeplitz structure already streams in O(n) memory)", name, kind)
	}
	return spec, nil
}
