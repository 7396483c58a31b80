package nn

import (
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
)

// Bag says how an Embedding combines the vectors of its id columns.
type Bag uint8

// Bag modes.
const (
	// NoBag concatenates one vector per id column.
	NoBag Bag = iota
	// SumBag adds the vectors of all id columns (one table).
	SumBag
	// MeanBag averages the vectors of the id columns that are present.
	MeanBag
)

var bagNames = [...]string{NoBag: "none", SumBag: "sum", MeanBag: "mean"}

func (b Bag) String() string {
	if b > MeanBag {
		return fmt.Sprintf("Bag(%d)", uint8(b))
	}
	return bagNames[b]
}

// MarshalText writes the bag mode's name (model files record it so).
func (b Bag) MarshalText() ([]byte, error) {
	if b > MeanBag {
		return nil, dpcore.Invalidf("%v", b)
	}
	return []byte(b.String()), nil
}

// UnmarshalText reads a name written by MarshalText.
func (b *Bag) UnmarshalText(t []byte) error {
	for c, name := range bagNames {
		if string(t) == name {
			*b = Bag(c)
			return nil
		}
	}
	return dpcore.Invalidf("bag mode %q (want none, sum or mean)", t)
}

// EmbeddingTable is a learned table of Vocab vectors of Dim entries
// (Weight: Vocab x Dim, row-major).
type EmbeddingTable struct {
	Vocab, Dim int
	Weight     Param
}

// Embedding maps the integer ids in the columns of a flat input to learned
// vectors. It must be the first layer: its input is the example itself.
// The first Numeric columns are passed through unchanged (tabular data:
// numeric features next to categorical ones); every other column holds an
// id in [0, Vocab) as a float, or -1 for "absent" (the padding of a
// variable-length id list), which contributes nothing.
//
// With one table, every id column looks up that table; otherwise there
// is one table per id column. NoBag outputs the numeric columns then one
// vector per id column (zeros when absent); SumBag and MeanBag (one table)
// output the numeric columns then the sum or mean of the present ids'
// vectors. Each example's gradient touches only the rows of its own ids,
// so its norm is computed exactly from those rows.
type Embedding struct {
	Numeric int
	Tables  []EmbeddingTable
	Bag     Bag
}

func (e Embedding) out(in Shape) (Shape, error) {
	if !in.flat() {
		return Shape{}, dpcore.Invalidf("embedding needs a flat input of columns, not %dx%dx%d", in.C, in.H, in.W)
	}
	ids := in.C - e.Numeric
	if e.Numeric < 0 || ids <= 0 || len(e.Tables) == 0 {
		return Shape{}, dpcore.Invalidf("embedding: %d numeric of %d columns, %d tables", e.Numeric, in.C, len(e.Tables))
	}
	if len(e.Tables) != 1 && len(e.Tables) != ids {
		return Shape{}, dpcore.Invalidf("embedding: %d tables for %d id columns (want 1 or one each)", len(e.Tables), ids)
	}
	if e.Bag > MeanBag || (e.Bag != NoBag && len(e.Tables) != 1) {
		return Shape{}, dpcore.Invalidf("embedding: bag mode %d needs one table", e.Bag)
	}
	out := e.Numeric
	for i, t := range e.Tables {
		if t.Vocab <= 0 || t.Dim <= 0 || t.Weight.Len != t.Vocab*t.Dim || t.Weight.Offset < 0 {
			return Shape{}, dpcore.Invalidf("embedding table %d: vocabulary %d, dimension %d, weight %+v", i, t.Vocab, t.Dim, t.Weight)
		}
	}
	switch {
	case e.Bag != NoBag:
		out += e.Tables[0].Dim
	case len(e.Tables) == 1:
		out += ids * e.Tables[0].Dim
	default:
		for _, t := range e.Tables {
			out += t.Dim
		}
	}
	return Shape{out, 1, 1}, nil
}

// table returns the table of id column c (0-based after the numeric
// columns) and the offset of its vector in the output.
func (e *Embedding) table(c int) (EmbeddingTable, int) {
	if len(e.Tables) == 1 {
		if e.Bag != NoBag {
			return e.Tables[0], e.Numeric
		}
		return e.Tables[0], e.Numeric + c*e.Tables[0].Dim
	}
	off := e.Numeric
	for _, t := range e.Tables[:c] {
		off += t.Dim
	}
	return e.Tables[c], off
}

// checkIDs reports the first id that is not an integer in [0, Vocab) or
// -1, for a clear error before a step runs.
func (e *Embedding) checkIDs(x []float32, n, cols int) error {
	for i := range n {
		row := x[i*cols : (i+1)*cols]
		for c := range cols - e.Numeric {
			v := row[e.Numeric+c]
			t, _ := e.table(c)
			if v == -1 {
				continue
			}
			if v != float32(math.Trunc(float64(v))) || v < 0 || int(v) >= t.Vocab {
				return dpcore.Invalid("nn", "example %d column %d: id %v is not an integer in [0, %d) or -1", i, e.Numeric+c, v, t.Vocab)
			}
		}
	}
	return nil
}

// present counts the example's ids that are not -1.
func (e *Embedding) present(row []float32) int {
	k := 0
	for _, v := range row[e.Numeric:] {
		if v != -1 {
			k++
		}
	}
	return k
}

// forward writes one example's output.
func (e *Embedding) forward(params, row, out []float32) {
	copy(out[:e.Numeric], row[:e.Numeric])
	clear(out[e.Numeric:])
	scale := float32(1)
	if e.Bag == MeanBag {
		if k := e.present(row); k > 0 {
			scale = 1 / float32(k)
		}
	}
	for c, v := range row[e.Numeric:] {
		if v == -1 {
			continue
		}
		t, off := e.table(c)
		vec := params[t.Weight.Offset+int(v)*t.Dim : t.Weight.Offset+(int(v)+1)*t.Dim]
		axpy(scale, vec, out[off:off+t.Dim])
	}
}

// grads visits example row's gradient rows: for each table and distinct
// id, the sum over its columns of the output gradient (scaled for the
// mean), written into scratch (float64 accumulation) and passed to f as
// float32 values in vec.
func (e *Embedding) grads(row, dy []float32, scratch []float64, vec []float32, f func(t EmbeddingTable, id int, vec []float32)) {
	scale := 1.0
	if e.Bag == MeanBag {
		if k := e.present(row); k > 0 {
			scale = 1 / float64(k)
		}
	}
	ids := row[e.Numeric:]
	for c, v := range ids {
		if v == -1 {
			continue
		}
		t, off := e.table(c)
		// Only the first column with this (table, id) emits its row.
		first := true
		for c2 := range c {
			t2, _ := e.table(c2)
			if ids[c2] == v && t2.Weight == t.Weight {
				first = false
				break
			}
		}
		if !first {
			continue
		}
		acc := scratch[:t.Dim]
		clear(acc)
		for c2 := c; c2 < len(ids); c2++ {
			t2, off2 := e.table(c2)
			if ids[c2] != v || t2.Weight != t.Weight {
				continue
			}
			for k, g := range dy[off2 : off2+t.Dim] {
				acc[k] += float64(g)
			}
		}
		_ = off
		out := vec[:t.Dim]
		for k, a := range acc {
			out[k] = float32(a * scale)
		}
		f(t, int(v), out)
	}
}
