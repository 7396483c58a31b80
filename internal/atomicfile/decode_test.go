package atomicfile

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// hugeDeclarations are inputs of a few bytes that declare far more than
// they hold; msgpack.Unmarshal alone allocates up to the declared 2-4 GiB
// for the first ones before it finds the input short.
var hugeDeclarations = map[string][]byte{
	"envelope payload bin32 2 GiB": {0x81, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0xc6, 0x7f, 0xff, 0xff, 0x00},
	"envelope payload bin32 4 GiB": {0x81, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0xc6, 0xff, 0xff, 0xff, 0xff, 1, 2, 3},
	"envelope magic str32":         {0x81, 0xa5, 'm', 'a', 'g', 'i', 'c', 0xdb, 0x7f, 0xff, 0xff, 0x00},
	"nested array32":               {0x81, 0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd', 0x91, 0xdd, 0x7f, 0xff, 0xff, 0x00, 1},
	"map32":                        {0xdf, 0x7f, 0xff, 0xff, 0x00, 0xa1, 'a'},
	"ext32":                        {0xc9, 0x7f, 0xff, 0xff, 0x00, 1},
	"truncated float64":            {0x81, 0xa7, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0xcb, 0, 0},
	"missing map values":           {0x83, 0xa1, 'a', 1},
	"invalid byte":                 {0xc1},
	"empty":                        {},
}

func TestUnmarshalRefusesDeclaredLengthsBeyondTheInput(t *testing.T) {
	for name, blob := range hugeDeclarations {
		var env envelope
		var err error
		n := allocated(func() { err = Unmarshal(blob, &env) })
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
		if n > 1<<20 {
			t.Errorf("%s: allocated %d bytes for a %d-byte input", name, n, len(blob))
		}
		var payload []byte
		n = allocated(func() { payload, err = Open(blob, "kind", 1) })
		if !errors.Is(err, ErrCorrupt) || payload != nil {
			t.Errorf("%s: Open: err %v, want ErrCorrupt", name, err)
		}
		if n > 1<<20 {
			t.Errorf("%s: Open allocated %d bytes for a %d-byte input", name, n, len(blob))
		}
	}
}

// TestCheckLengthsAcceptsEncodedValues: everything the encoder writes
// passes, and no strict prefix of it does (every value has at least one
// byte, so a cut always leaves a declared length or a value short).
func TestCheckLengthsAcceptsEncodedValues(t *testing.T) {
	type inner struct {
		F32 []float32
		M   map[string]int64
		X   any
	}
	type value struct {
		S     string
		B     []byte
		I     []int64
		U     uint64
		F     float64
		Bool  bool
		Nil   *int
		Inner []inner
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		v := value{S: string(make([]byte, rng.IntN(300))), B: make([]byte, rng.IntN(70000)), U: rng.Uint64(), F: rng.NormFloat64(), Bool: trial%2 == 0}
		for range rng.IntN(40) {
			v.I = append(v.I, int64(rng.Uint64())>>rng.IntN(64))
		}
		for range rng.IntN(4) {
			in := inner{M: map[string]int64{}, X: []any{"x", 1.5, nil, map[string]any{"k": []byte{1}}}}
			for range rng.IntN(20) {
				in.F32 = append(in.F32, float32(rng.NormFloat64()))
				in.M[string(rune('a'+rng.IntN(26)))] = int64(rng.IntN(1 << 40))
			}
			v.Inner = append(v.Inner, in)
		}
		b, err := msgpack.Marshal(&v)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkLengths(b); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		var back value
		if err := Unmarshal(b, &back); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		for _, cut := range []int{0, 1, len(b) / 3, len(b) / 2, len(b) - 1} {
			if err := checkLengths(b[:cut]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("trial %d: prefix of %d of %d bytes: err %v", trial, cut, len(b), err)
			}
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, b := range hugeDeclarations {
		f.Add(b)
	}
	good, _ := Seal("kind", 1, []byte("payload"))
	f.Add(good)
	f.Fuzz(func(t *testing.T, blob []byte) {
		// Allocation is measured by the table test above: reading memory
		// statistics on every input stops the world and made minimizing
		// outlast -fuzztime in CI ("context deadline exceeded").
		var env envelope
		if err := Unmarshal(blob, &env); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("err %v", err)
		}
		if err := checkLengths(blob); err == nil {
			// An accepted value's declared lengths all fit: decoding it
			// with the plain decoder must not report a short input.
			var anyv any
			if err := msgpack.Unmarshal(blob, &anyv); err != nil && strings.Contains(err.Error(), "EOF") {
				t.Fatalf("checkLengths accepted a short input: %v", err)
			}
		}
	})
}
