package noise

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// TestStateFormatUnchanged: the checkpoint state of every source kind, and
// the noise that follows it, hash to the values the sources gave when they
// lived in package mfnoise (computed there with the same seed, n = 12,
// d = 40, state at step 5). A checkpoint written before the move therefore
// restores here and continues with the same noise. Three test
// factorizations are left out: their decoders (optimal, Honaker under
// momentum) are products whose last bits depend on the BLAS kernels of the
// machine, and so do their hashes.
func TestStateFormatUnchanged(t *testing.T) {
	want := map[string]string{
		"banded4/momentum":              "7ed6b10d62b91d85",
		"banded4/prefix":                "0a1a009f13e9021c",
		"bisr:3":                        "2d7a27aba2ce2c58",
		"blt:2":                         "a95a22d3f6463e4a",
		"dense-lower/momentum":          "8ae46f50d41ba7ec",
		"dense-lower/prefix":            "2b2ed65ca7c0ac9c",
		"identity/momentum":             "60a456477026adc8",
		"identity/prefix":               "60a456477026adc8",
		"sqrt":                          "f4f2bece26134a82",
		"stamped-square/momentum":       "f440f45d17907395",
		"stamped-square/prefix":         "df982a43157957a5",
		"stamped-tree-optimal/momentum": "9c1b0f6936288ecb",
		"stamped-tree-optimal/prefix":   "4b60076e60783627",
		"tree-honaker-online/prefix":    "6ecb43574b4bb8b4",
		"tree-online/momentum":          "ac144972162a28eb",
		"tree-online/prefix":            "685e6cec7c9fa8eb",
	}
	got := goldenStateHashes(t)
	if len(got) != len(want)+3 {
		t.Errorf("%d sources hashed, want %d", len(got), len(want)+3)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: state and noise hash %s, want %s", name, got[name], w)
		}
	}
}

// legacyLayout re-encodes a state in the layout the builds before the
// state codec wrote (legacyStateMagic, the header, the buffers): the
// golden hashes were taken of that layout, so the state's content is
// checked unchanged field for field.
func legacyLayout(t *testing.T, state []byte) []byte {
	t.Helper()
	var st sourceState
	if err := atomicfile.UnmarshalState(state, stateMagic, stateVersion, &st); err != nil {
		t.Fatal(err)
	}
	b := appendString([]byte(legacyStateMagic), st.Kind)
	for _, v := range []int{st.N, st.M, st.D, st.Elem, st.Step} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	b = append(append(b, st.Mech...), st.Plan...)
	return append(b, st.Buffers...)
}

// goldenStateHashes hashes, per test mechanism, the state at step 5 and the
// noise rows after it.
func goldenStateHashes(t *testing.T) map[string]string {
	const d, at = 40, 5
	out := map[string]string{}
	for name, s := range testSources(t, 9) {
		buf := make([]float32, d)
		for range at {
			if err := s.Next(buf); err != nil {
				t.Fatal(err)
			}
		}
		state, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		h.Write(legacyLayout(t, state))
		for s.Step() < s.N() {
			if err := s.Next(buf); err != nil {
				t.Fatal(err)
			}
			binary.Write(h, binary.LittleEndian, buf)
		}
		out[name] = hex.EncodeToString(h.Sum(nil)[:8])
	}
	return out
}

// testSources builds, with testSeed(seed), a source of every test
// mechanism (n = 12, d = 40, one worker), named as in the golden hashes.
func testSources(t *testing.T, seed byte) map[string]Source {
	const n, d = 12, 40
	out := map[string]Source{}
	add := func(name string, s Source, err error) {
		if err != nil {
			t.Fatal(err)
		}
		out[name] = s
	}
	opt := Options{Seed: testSeed(seed), Workers: 1}
	for _, nf := range testFacts(t, n) {
		s, err := New(nf.f, d, opt)
		add(nf.name+"/"+string(nf.f.Workload.Kind), s, err)
	}
	sq, _ := toeplitz.Sqrt(n)
	s, err := NewToeplitz(sq, d, opt)
	add("sqrt", s, err)
	blt, _ := toeplitz.NewBLT("blt:2", n, toeplitz.BLTParams{Theta: []float64{0.9, 0.5}, Omega: []float64{0.3, 0.2}})
	s, err = NewToeplitz(blt, d, opt)
	add("blt:2", s, err)
	bisr, _ := toeplitz.BandedInverseSqrt(n, 3)
	s, err = NewToeplitz(bisr, d, opt)
	add("bisr:3", s, err)
	return out
}
