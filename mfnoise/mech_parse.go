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
)

// MechanismSpec is a parsed mechanism name, the CLI contract: one of
// dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb,
// bandmf:BANDS (BANDS an integer or "auto"), each optionally followed by
// /sS for S stamps, e.g. "tree-full/s5" or "bandmf:auto/s2".
type MechanismSpec struct {
	// Name is the text as given (trimmed); Compare reports it.
	Name string `json:"name"`
	// Kind is one of the Kind constants, e.g. KindTreeFull.
	Kind string `json:"kind"`
	// Bands is the band count of bandmf (0 with AutoBands).
	Bands     int  `json:"bands,omitempty"`
	AutoBands bool `json:"auto_bands,omitempty"`
	// Stamps is the number of stamped copies; 1 means not stamped.
	Stamps int `json:"stamps"`
}

// String is the canonical name, e.g. "bandmf:8/s2".
func (s MechanismSpec) String() string {
	name := s.Kind
	if s.Kind == KindBandMF {
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
	case KindDPSGD, KindTreeOnline, KindTreeFull, KindFFT, KindFFTOpt, KindMFSingle, KindMFKB:
		if hasBands {
			return MechanismSpec{}, invalidf("mechanism %q: only bandmf takes a :BANDS argument", name)
		}
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
		return MechanismSpec{}, invalidf("unknown mechanism %q (known: dpsgd, tree-online, tree-full, fft, fft-opt, mf-single, mf-kb, bandmf:BANDS, each optionally /sS)", name)
	}
	return spec, nil
}

// ParseMechanisms parses a comma-separated list of mechanism names.
func ParseMechanisms(list string) ([]MechanismSpec, error) {
	if strings.TrimSpace(list) == "" {
		return nil, invalidf("empty mechanism list")
	}
	var specs []MechanismSpec
	for i, item := range strings.Split(list, ",") {
		// Errors from ParseMechanism already name the entry.
		if strings.TrimSpace(item) == "" {
			return nil, invalidf("mechanism list %q: entry %d is empty", list, i+1)
		}
		s, err := ParseMechanism(item)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}
