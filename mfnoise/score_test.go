package mfnoise

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// A caller's factorization scores exactly as the same mechanism does in
// Compare.
func TestScoreMatchesCompare(t *testing.T) {
	w, _ := dpcore.PrefixSum(16)
	schema, _ := dpcore.KBParticipation(2, 8)
	rows, err := Compare(context.Background(), w, schema, []Mechanism{Tree{Decoder: TreeFull}}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := BinaryTree(w, TreeOptions{Decoder: TreeFull})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Score("mine", f, schema)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Loss-rows[0].Loss) > 1e-9*rows[0].Loss || got.Sensitivity != rows[0].Sensitivity || got.Mechanism != "mine" {
		t.Fatalf("score %+v, compare %+v", got, rows[0])
	}
	if _, err := Score("none", nil, schema); err == nil {
		t.Fatal("nil factorization scored")
	}
}

// named returns the typed mechanisms whose canonical names (String) are
// the comma-separated list, found among this package's families with small
// parameters (command lines parse names with privacy.ParseMechanism).
func named(t testing.TB, list string) []Mechanism {
	t.Helper()
	var all []Mechanism
	plain := []Mechanism{DPSGD{}, Tree{Decoder: TreeOnline}, Tree{Decoder: TreeFull}, FFT{Decoder: FFTAlgorithm1}, FFT{Decoder: FFTOptimal}, MFSingle{}, MFKB{}, Sqrt{}, BandMF{Auto: true}, BandedToeplitz{Auto: true}}
	all = append(all, plain...)
	for b := 1; b <= 64; b++ {
		all = append(all, BandMF{Bands: b}, BandedToeplitz{Bands: b}, BLT{Buffers: b}, BISR{Bands: b})
	}
	for _, m := range all {
		if inner, ok := m.(Blocked); ok && !m.Structure().AutoBands {
			for s := 2; s <= 10; s++ {
				all = append(all, Stamped{Inner: inner, Stamps: s})
			}
		}
	}
	var ms []Mechanism
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, m := range all {
			if m.String() == name {
				ms, found = append(ms, m), true
				break
			}
		}
		if !found {
			t.Fatalf("no mechanism named %q", name)
		}
	}
	return ms
}

// userMechanism is a caller's mechanism (not a Coster: costed, and refused
// above dpcore.DenseStepLimit, as dense); Build counts its calls.
type userMechanism struct {
	f     *Factorization
	calls *int
}

func (m userMechanism) String() string       { return "user" }
func (m userMechanism) Structure() Structure { return Structure{} }
func (m userMechanism) Build(context.Context, dpcore.Workload, dpcore.Schema, BuildOptions) (dpcore.Strategy, error) {
	*m.calls++
	return m.f, nil
}

// Compare scores a caller's Mechanism from the factorization it builds,
// exactly as Score does; above dpcore.DenseStepLimit it refuses with the memory a
// dense score needs before asking the mechanism to build anything.
func TestCompareUserMechanism(t *testing.T) {
	w, _ := dpcore.PrefixSum(16)
	schema, _ := dpcore.KBParticipation(2, 8)
	f, err := BinaryTree(w, TreeOptions{Decoder: TreeFull})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	rows, err := Compare(context.Background(), w, schema, []Mechanism{userMechanism{f, &calls}, DPSGD{}}, BuildOptions{})
	if err != nil || len(rows) != 2 || calls != 1 {
		t.Fatalf("rows %+v, err %v, %d calls", rows, err, calls)
	}
	want, err := Score("user", f, schema)
	if err != nil {
		t.Fatal(err)
	}
	got := rows[0]
	if rows[1].Mechanism == "user" {
		got = rows[1]
	}
	got.BuildSeconds = 0
	if got.Mechanism != "user" || got.Loss != want.Loss || got.Sensitivity != want.Sensitivity || got.NoiseMemoryPerCoord != 16 || got.StepTime != "O(n d)" {
		t.Fatalf("compare %+v, score %+v", got, want)
	}
	// Another number of steps than the workload's is refused.
	w32, _ := dpcore.PrefixSum(32)
	if _, err := Compare(context.Background(), w32, schema, []Mechanism{userMechanism{f, &calls}}, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "16 steps, not n = 32") {
		t.Fatalf("16-step factorization for 32 steps: %v", err)
	}
	calls = 0
	big, _ := dpcore.PrefixSum(dpcore.DenseStepLimit + 1)
	_, err = Compare(context.Background(), big, dpcore.SingleParticipation(), []Mechanism{userMechanism{f, &calls}}, BuildOptions{})
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "GiB") || calls != 0 {
		t.Fatalf("n = %d: err %v after %d Factorize calls", big.N, err, calls)
	}
	if _, err := Compare(context.Background(), w, schema, []Mechanism{nil}, BuildOptions{}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("nil mechanism: %v", err)
	}
}
