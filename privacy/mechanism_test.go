package privacy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// Every name parses to a typed value whose canonical name is the name, so
// Compare scores and the planner plans exactly what was asked for.
func TestParseMechanismNamesTheMechanism(t *testing.T) {
	for _, name := range []string{"dpsgd", "tree-online", "tree-full", "fft", "fft-opt", "mf-single", "mf-kb", "bandmf:8", "bandmf:auto",
		"tree-online/s4", "bandmf:4/s2", "mf-kb/s2", "sqrt", "toeplitz:4", "toeplitz:auto", "blt:3", "bisr:2"} {
		m, err := ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		if m.String() != name {
			t.Errorf("%q: %T %v", name, m, m)
		}
	}
	for _, in := range []string{"nope", "dpsgd:2", "bandmf", "bandmf:0", "toeplitz:x", "blt:33", "bisr", "sqrt/s2", "blt:2/s2", "toeplitz:auto/s2", "bandmf:auto/s2", "fft/s0", "fft/x"} {
		if _, err := ParseMechanism(in); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("ParseMechanism(%q) err = %v, want dpcore.ErrInvalid", in, err)
		}
	}
	w, _ := dpcore.PrefixSum(4)
	for _, m := range []mfnoise.Mechanism{mfnoise.Stamped{Inner: mfnoise.BandMF{Auto: true}, Stamps: 2}, mfnoise.Stamped{Inner: mfnoise.DPSGD{}}, mfnoise.Stamped{Stamps: 2}} {
		if _, err := m.Build(context.Background(), w, dpcore.SingleParticipation(), mfnoise.BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%v: err = %v, want dpcore.ErrInvalid", m, err)
		}
	}
}

func TestParseMechanisms(t *testing.T) {
	list, err := ParseMechanisms("dpsgd, tree-full/s5,bandmf:auto,blt:2")
	if err != nil || len(list) != 4 {
		t.Fatalf("ParseMechanisms = %v, %v", list, err)
	}
	if s, ok := list[1].(mfnoise.Stamped); !ok || s.Stamps != 5 || list[2] != (mfnoise.BandMF{Auto: true}) || list[3].String() != "blt:2" {
		t.Fatalf("ParseMechanisms = %#v", list)
	}
	for _, in := range []string{"", " ", "dpsgd,,fft", "dpsgd,", "dpsgd,nope", "dpsgd,bandmf:auto/s2"} {
		if _, err := ParseMechanisms(in); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("ParseMechanisms(%q) err = %v", in, err)
		}
	}
	if _, err := ParseMechanisms("dpsgd,nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("error does not name the bad entry: %v", err)
	}
}

// A caller's factorization for another number of steps is refused before
// either workload matrix is built (n = 50000 would need 20 GB).
func TestFactorizationChecksStepsFirst(t *testing.T) {
	w, _ := dpcore.PrefixSum(16)
	f, err := mfnoise.DenseDPSGD(w)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := dpcore.PrefixSum(50000)
	_, err = CustomFactorization{Name: "mine", F: f}.Build(context.Background(), big, dpcore.SingleParticipation(), mfnoise.BuildOptions{})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "mine factorizes 16 steps, but the run has 50000") {
		t.Fatalf("err = %v", err)
	}
	// A verified band declaration travels with the factorization (Compare
	// costs its noise as banded); the caller's value is not changed.
	st, err := CustomFactorization{Name: "mine", F: f, Bands: 1}.Build(context.Background(), w, dpcore.SingleParticipation(), mfnoise.BuildOptions{})
	got, _ := st.(*mfnoise.Factorization)
	if err != nil || got == nil || got.Meta.Bands != 1 || f.Meta.Bands != 0 {
		t.Fatalf("bands %d (caller's %d), %v", got.Meta.Bands, f.Meta.Bands, err)
	}
}
