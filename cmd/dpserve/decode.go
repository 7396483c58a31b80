package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// decodeContribution parses the body {"contributor": "id", "vector": [..]}
// (keys in any order, each once, no others) in one pass. encoding/json
// spends about 300 ns per number through reflection, most of a d = 10,000
// request's cost; this scanner hands each number token, checked against
// the JSON grammar, to strconv.ParseFloat. TestDecodeMatchesEncodingJSON
// checks it accepts and rejects exactly what encoding/json does for this
// shape, with the same values.
func decodeContribution(b []byte) (contribution, error) {
	var c contribution
	p := parser{b: b}
	p.ws()
	if !p.eat('{') {
		return c, p.errorf("want an object")
	}
	seen := map[string]bool{}
	p.ws()
	for !p.eat('}') {
		p.ws()
		key, err := p.str()
		if err != nil {
			return c, err
		}
		if seen[key] {
			return c, p.errorf("duplicate key %q", key)
		}
		seen[key] = true
		p.ws()
		if !p.eat(':') {
			return c, p.errorf("want ':'")
		}
		p.ws()
		switch key {
		case "contributor":
			if c.Contributor, err = p.str(); err != nil {
				return c, err
			}
		case "vector":
			if c.Vector, err = p.floats(); err != nil {
				return c, err
			}
		default:
			return c, p.errorf("unknown field %q", key)
		}
		p.ws()
		if p.eat('}') {
			break
		}
		if !p.eat(',') {
			return c, p.errorf("want ',' or '}'")
		}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			return c, p.errorf("want a key after ','")
		}
	}
	p.ws()
	if p.i != len(p.b) {
		return c, p.errorf("more than one value in the body")
	}
	return c, nil
}

type parser struct {
	b []byte
	i int
}

var errNonFinite = errors.New("non-finite number")

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *parser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a JSON string. Plain ASCII needs no decoding; anything else
// (escapes, control characters, other bytes) is decoded or refused by
// encoding/json.
func (p *parser) str() (string, error) {
	start := p.i
	if !p.eat('"') {
		return "", p.errorf("want a string")
	}
	plain := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '\\':
			plain = false
			p.i += 2
			continue
		case c == '"':
			p.i++
			tok := p.b[start:p.i]
			if plain {
				return string(tok[1 : len(tok)-1]), nil
			}
			var s string
			if err := json.Unmarshal(tok, &s); err != nil {
				return "", p.errorf("bad string: %v", err)
			}
			return s, nil
		case c < 0x20 || c >= 0x80:
			plain = false
		}
		p.i++
	}
	return "", p.errorf("unterminated string")
}

// floats reads an array of JSON numbers (or null for no vector).
func (p *parser) floats() ([]float64, error) {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return nil, nil
	}
	if !p.eat('[') {
		return nil, p.errorf("vector: want an array of numbers")
	}
	// A number takes at least 2 bytes with its comma: size once.
	out := make([]float64, 0, min(len(p.b)-p.i, 1<<20)/2+1)
	p.ws()
	if p.eat(']') {
		return out, nil
	}
	for {
		p.ws()
		v, err := p.number()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		p.ws()
		if p.eat(']') {
			return out, nil
		}
		if !p.eat(',') {
			return nil, p.errorf("vector: want ',' or ']'")
		}
	}
}

// number reads a token of the JSON number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() (float64, error) {
	start := p.i
	b := p.b
	i := p.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - s
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return 0, p.errorf("vector: want a number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0, p.errorf("vector: bad number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0, p.errorf("vector: bad number")
		}
	}
	p.i = i
	if v, ok := fastFloat(b[start:i]); ok {
		return v, nil
	}
	v, err := strconv.ParseFloat(string(b[start:i]), 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, fmt.Errorf("offset %d: vector: number %s: %w", start, b[start:i], errNonFinite)
	}
	return v, nil
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// fastFloat converts a grammar-checked JSON number exactly when its
// significand has at most 15 digits and the decimal exponent lies in
// [-22, 22]: both the significand and 10^|e| are exact float64 values, so
// one multiplication or division rounds correctly (Clinger 1990, the fast
// path of strconv itself). It reports false otherwise.
func fastFloat(tok []byte) (float64, bool) {
	neg := false
	i := 0
	if tok[0] == '-' {
		neg, i = true, 1
	}
	var mant uint64
	nd, exp := 0, 0
	for ; i < len(tok) && tok[i] >= '0' && tok[i] <= '9'; i++ {
		if mant == 0 && tok[i] == '0' {
			continue
		}
		mant = mant*10 + uint64(tok[i]-'0')
		nd++
	}
	if i < len(tok) && tok[i] == '.' {
		for i++; i < len(tok) && tok[i] >= '0' && tok[i] <= '9'; i++ {
			exp--
			if mant == 0 && tok[i] == '0' {
				continue
			}
			mant = mant*10 + uint64(tok[i]-'0')
			nd++
		}
	}
	if nd > 15 {
		return 0, false
	}
	if i < len(tok) {
		// Exponent: [eE][+-]?digits, at most 3 digits handled here.
		i++
		eneg := false
		if tok[i] == '+' || tok[i] == '-' {
			eneg = tok[i] == '-'
			i++
		}
		if len(tok)-i > 3 {
			return 0, false
		}
		e := 0
		for ; i < len(tok); i++ {
			e = e*10 + int(tok[i]-'0')
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	f := float64(mant)
	switch {
	case mant == 0:
		f = 0
	case exp >= 0 && exp <= 22:
		f *= pow10[exp]
	case exp < 0 && exp >= -22:
		f /= pow10[-exp]
	default:
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}
