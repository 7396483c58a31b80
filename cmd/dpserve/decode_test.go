package main

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// reference decodes like the handler did with encoding/json.
func reference(b []byte) (contribution, error) {
	var c contribution
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	if dec.More() {
		return c, strconv.ErrSyntax
	}
	// encoding/json accepts trailing whitespace only.
	if _, err := dec.Token(); err == nil {
		return c, strconv.ErrSyntax
	}
	return c, nil
}

// TestDecodeMatchesEncodingJSON is a differential test: on valid bodies,
// hand-picked malformed ones and random mutations of valid ones, the fast
// decoder accepts exactly what encoding/json accepts, with the same values.
// (It is stricter in two documented ways, excluded here: duplicate keys and
// keys differing from the field names in case are refused.)
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	cases := []string{
		`{"contributor":"a","vector":[1,2.5,-3e-2,0,-0,1E+3,0.000001]}`,
		` { "vector" : [ 1 , 2 ] , "contributor" : "a\\u00e9\\n" } `,
		`{"contributor":"é","vector":[]}`,
		`{"contributor":"a","vector":null}`,
		`{}`,
		`{"contributor":"a","vector":[1,2,]}`,
		`{"contributor":"a","vector":[01]}`,
		`{"contributor":"a","vector":[1.]}`,
		`{"contributor":"a","vector":[.5]}`,
		`{"contributor":"a","vector":[+1]}`,
		`{"contributor":"a","vector":[1e]}`,
		`{"contributor":"a","vector":[NaN]}`,
		`{"contributor":"a","vector":[Infinity]}`,
		`{"contributor":"a","vector":[0x10]}`,
		`{"contributor":"a","vector":[1e999]}`,
		`{"contributor":"a","vector":[1e-999]}`,
		`{"contributor":"a","vector":["1"]}`,
		`{"contributor":1,"vector":[1]}`,
		`{"contributor":"a","vector":[1],"x":1}`,
		`{"contributor":"a	b","vector":[1]}`,
		`{"contributor":"a","vector":[1]}{}`,
		`{"contributor":"a","vector":[1]} x`,
		`{"contributor":"a\\x","vector":[1]}`,
		`{"contributor":"a","vector":[1]`,
		`[1]`,
		``,
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		b := []byte(cases[rng.IntN(3)])
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b = slices.Delete(b, i, i+1)
			case 1:
				b = slices.Insert(b, i, `"{}[],:.-+eE019 \a`[rng.IntN(18)])
			case 2:
				b[i] = `"{}[],:.-+eE019 \a`[rng.IntN(18)]
			}
		}
		cases = append(cases, string(b))
	}
	agree := 0
	for _, c := range cases {
		if bytes.Count([]byte(c), []byte(`"contributor"`)) > 1 || bytes.Count([]byte(c), []byte(`"vector"`)) > 1 {
			continue
		}
		got, gerr := decodeContribution([]byte(c))
		want, werr := reference([]byte(c))
		if (gerr == nil) != (werr == nil) {
			t.Errorf("%q: fast decoder error %v, encoding/json error %v", c, gerr, werr)
			continue
		}
		if gerr == nil && (got.Contributor != want.Contributor || !slices.Equal(got.Vector, want.Vector) || (got.Vector == nil) != (want.Vector == nil)) {
			t.Errorf("%q: fast decoder %+v, encoding/json %+v", c, got, want)
			continue
		}
		agree++
	}
	t.Logf("%d bodies agree", agree)
}

// TestFastFloat checks the exact fast path against strconv.ParseFloat on
// random numbers in the forms clients print, and at its edges.
func TestFastFloat(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	toks := []string{"0", "-0", "0.0", "1e22", "1e23", "123456789012345", "1234567890123456", "1.5e-22", "9e-23",
		"0.000000000000000000000001", "100000000000000000000000", "-12.5E+2", "4.9e-324", "1e308"}
	for range 20000 {
		v := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))
		toks = append(toks, strconv.FormatFloat(v, 'g', 1+rng.IntN(17), 64), strconv.FormatFloat(v, 'f', rng.IntN(20), 64))
	}
	fast := 0
	for _, tok := range toks {
		want, err := strconv.ParseFloat(tok, 64)
		if err != nil {
			t.Fatal(err)
		}
		p := parser{b: []byte(tok)}
		got, err := p.number()
		if err != nil || math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%s: %v (%v), want %v", tok, got, err, want)
		}
		if _, ok := fastFloat([]byte(tok)); ok {
			fast++
		}
	}
	t.Logf("%d of %d numbers took the fast path", fast, len(toks))
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"contributor":"x","vector":[`)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 10000 {
		if i > 0 {
			body = append(body, ',')
		}
		body = strconv.AppendFloat(body, rng.NormFloat64()*0.1, 'g', 8, 64)
	}
	body = append(body, "]}"...)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeContribution(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := reference(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
