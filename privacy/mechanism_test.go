package privacy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// Every built-in mechanism is an mfnoise.Builtin whose spec names the same
// mechanism, so Compare scores exactly what the planner builds.
func TestBuiltinSpecNamesTheMechanism(t *testing.T) {
	for _, name := range []string{"dpsgd", "tree-online", "tree-full", "fft", "fft-opt", "mf-single", "mf-kb", "bandmf:8", "bandmf:auto",
		"tree-online/s4", "bandmf:4/s2", "mf-kb/s2", "sqrt", "toeplitz:4", "blt:3", "bisr:2"} {
		m, err := ParseMechanism(name)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := m.(mfnoise.Builtin)
		if !ok {
			t.Fatalf("%v (%T) is not an mfnoise.Builtin", m, m)
		}
		s, err := b.BuiltinSpec()
		if err != nil || s.String() != name || m.String() != name {
			t.Errorf("%q: %T %v has spec %v, %v", name, m, m, s, err)
		}
	}
	for _, m := range []mfnoise.Builtin{Stamped{Inner: BandMF{Auto: true}, Stamps: 2}, Stamped{Inner: DPSGD{}}, Stamped{Stamps: 2}} {
		if _, err := m.BuiltinSpec(); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%v: err = %v, want dpcore.ErrInvalid", m, err)
		}
	}
}

func TestParseMechanisms(t *testing.T) {
	list, err := ParseMechanisms("dpsgd, tree-full/s5,bandmf:auto,blt:2")
	if err != nil || len(list) != 4 {
		t.Fatalf("ParseMechanisms = %v, %v", list, err)
	}
	if s, ok := list[1].(Stamped); !ok || s.Stamps != 5 || list[2] != (BandMF{Auto: true}) || list[3].String() != "blt:2" {
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
	w, _ := mfnoise.PrefixSum(16)
	f, err := mfnoise.DPSGD(w)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := mfnoise.PrefixSum(50000)
	_, err = Factorization{Name: "mine", F: f}.Factorize(context.Background(), big, mfnoise.SingleParticipation(), mfnoise.BuildOptions{})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "mine factorizes 16 steps, but the run has 50000") {
		t.Fatalf("err = %v", err)
	}
	// A verified band declaration travels with the factorization (Compare
	// costs its noise as banded); the caller's value is not changed.
	got, err := Factorization{Name: "mine", F: f, Bands: 1}.Factorize(context.Background(), w, mfnoise.SingleParticipation(), mfnoise.BuildOptions{})
	if err != nil || got.Meta.Bands != 1 || f.Meta.Bands != 0 {
		t.Fatalf("bands %d (caller's %d), %v", got.Meta.Bands, f.Meta.Bands, err)
	}
}
