package data

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TabularSpec says how to read the columns of a CSV file with a header row.
type TabularSpec struct {
	// Label names the column holding the class. Its distinct values are
	// the classes, in sorted order (numerically if all are integers).
	Label string
	// Categorical names the columns whose values are categories; each
	// becomes one integer id feature (see Tabular). Every other column
	// except Label and Ignore must be numeric.
	Categorical []string
	// Ignore names columns to skip (ids, free text).
	Ignore []string
	// User, when set, names the column holding each row's owner (a user
	// id, any string): rows with the same value are one user's, and the
	// dataset's Owners number the users 0, 1, ... in order of first
	// appearance. The column is not a feature.
	User string
	// Numeric, when set, names the numeric columns, in the order of the
	// features; every column not named here, in Categorical or as Label is
	// then skipped. A model reads new files with the columns it was
	// trained on this way.
	Numeric []string
	// NoLabel reads rows without a label (inputs to predict): the Label
	// column is skipped if present, every example's label is 0, and a
	// vocabulary must be given (it fixes the classes).
	NoLabel bool
	// Comma is the field separator; 0 means ','.
	Comma rune
}

// Vocabulary fixes the encoding of a table's categorical columns and label:
// the levels of every categorical column and the classes. Reading a test
// file with the training file's Vocabulary gives both the same encoding.
//
// Privacy note: a vocabulary read from private data reveals which
// categories occur in it. For a strict guarantee, build it from public
// knowledge of the columns' domains and pass it to ReadCSV.
type Vocabulary struct {
	// Levels[j] are the levels of categorical column j (TabularSpec order).
	// Level l is encoded as id l+1; id 0 stands for a value not in Levels.
	Levels [][]string
	// Classes are the label values; class i is label i.
	Classes []string
}

// Tabular is a table read from CSV: a Dataset of shape Fx1x1 whose first
// len(Numeric) features are the numeric columns and whose last
// len(Categorical) features are the categorical columns' integer ids
// (stored exactly as float32; 0 = unknown level, l+1 = Vocab.Levels[j][l]).
type Tabular struct {
	*Dataset
	Numeric     []string
	Categorical []string
	Vocab       Vocabulary
}

// Cardinalities returns, for each categorical column, the number of ids it
// uses (its levels plus the unknown id 0): the sizes of the embedding
// tables a model needs.
func (t *Tabular) Cardinalities() []int {
	c := make([]int, len(t.Vocab.Levels))
	for j, l := range t.Vocab.Levels {
		c[j] = len(l) + 1
	}
	return c
}

// maxTabularCells bounds what ReadCSV accepts (2^28 features, 1 GiB of
// float32), so that a huge file is refused instead of exhausting memory.
const maxTabularCells = 1 << 28

// ReadCSV reads a CSV file with a header row. With vocab nil the
// categorical levels and the classes are taken from the file (sorted);
// otherwise vocab fixes them, unknown categorical values get id 0 and an
// unknown label is an error. Ragged rows, empty or non-numeric values in
// numeric columns, non-finite numbers, duplicate or missing columns are
// errors that name the line and column.
func ReadCSV(r io.Reader, spec TabularSpec, vocab *Vocabulary) (*Tabular, error) {
	cr := csv.NewReader(r)
	if spec.Comma != 0 {
		cr.Comma = spec.Comma
	}
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // ragged rows get our own message
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, formatf("csv: empty file, want a header row")
	}
	if err != nil {
		return nil, formatf("csv: header: %v", csvErr(err))
	}
	header = slices.Clone(header)
	col := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		if h == "" {
			return nil, formatf("csv: header column %d has no name", i+1)
		}
		if _, dup := col[h]; dup {
			return nil, formatf("csv: header names column %q twice", h)
		}
		col[h] = i
	}
	find := func(role, name string) (int, error) {
		i, ok := col[name]
		if !ok {
			return 0, invalidf("csv: %s column %q is not in the header %q", role, name, header)
		}
		return i, nil
	}
	role := make([]byte, len(header)) // 'n'umeric, 'c'ategorical, 'l'abel, 'i'gnore, 'u'ser
	for i := range role {
		role[i] = 'n'
	}
	labelCol := -1
	switch {
	case spec.NoLabel:
		if vocab == nil {
			return nil, invalidf("csv: rows without labels need the vocabulary of the model's training data")
		}
		if i, ok := col[spec.Label]; ok {
			role[i] = 'i'
		}
	case spec.Label == "":
		return nil, invalidf("csv: no label column named")
	default:
		if labelCol, err = find("label", spec.Label); err != nil {
			return nil, err
		}
		role[labelCol] = 'l'
	}
	// assign gives the named columns a role and returns their indices.
	assign := func(what string, names []string, r byte) ([]int, error) {
		cols := make([]int, len(names))
		for j, name := range names {
			i, err := find(what, name)
			if err != nil {
				return nil, err
			}
			if role[i] != 'n' {
				return nil, invalidf("csv: column %q given two roles", name)
			}
			role[i], cols[j] = r, i
		}
		return cols, nil
	}
	catCols, err := assign("categorical", spec.Categorical, 'c')
	if err != nil {
		return nil, err
	}
	if _, err := assign("ignored", spec.Ignore, 'i'); err != nil {
		return nil, err
	}
	userCol := -1
	if spec.User != "" {
		uc, err := assign("user", []string{spec.User}, 'u')
		if err != nil {
			return nil, err
		}
		userCol = uc[0]
	}
	var owners []int64
	ownerID := map[string]int64{}
	var numCols []int
	var numNames []string
	if spec.Numeric != nil {
		if numCols, err = assign("numeric", spec.Numeric, 'N'); err != nil {
			return nil, err
		}
		numNames = slices.Clone(spec.Numeric)
	} else {
		for i, r := range role {
			if r == 'n' {
				numCols = append(numCols, i)
				numNames = append(numNames, header[i])
			}
		}
	}
	if vocab != nil && len(vocab.Levels) != len(catCols) {
		return nil, invalidf("csv: vocabulary has %d categorical columns, spec names %d", len(vocab.Levels), len(catCols))
	}
	F := len(numCols) + len(catCols)
	if F == 0 {
		return nil, invalidf("csv: no feature columns besides the label")
	}

	var nums []float32
	var cats [][]string // per row, raw categorical values then the label
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, formatf("csv: %v", csvErr(err))
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, formatf("csv: line %d has %d fields, the header has %d", line, len(rec), len(header))
		}
		if (len(cats)+1)*F > maxTabularCells {
			return nil, invalidf("csv: more than %d feature values (%d MiB as float32): too large to hold in memory", maxTabularCells, maxTabularCells*4>>20)
		}
		for _, i := range numCols {
			s := strings.TrimSpace(rec[i])
			v, perr := strconv.ParseFloat(s, 64)
			if perr != nil || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
				return nil, formatf("csv: line %d column %q: %q is not a finite number", line, header[i], s)
			}
			nums = append(nums, float32(v))
		}
		row := make([]string, len(catCols)+1)
		for j, i := range catCols {
			row[j] = strings.TrimSpace(rec[i])
		}
		if labelCol >= 0 {
			row[len(catCols)] = strings.TrimSpace(rec[labelCol])
			if row[len(catCols)] == "" {
				return nil, formatf("csv: line %d: empty label", line)
			}
		}
		cats = append(cats, row)
		if userCol >= 0 {
			u := strings.TrimSpace(rec[userCol])
			if u == "" {
				return nil, formatf("csv: line %d: empty user id in column %q", line, spec.User)
			}
			id, ok := ownerID[u]
			if !ok {
				id = int64(len(ownerID))
				ownerID[u] = id
			}
			owners = append(owners, id)
		}
	}
	n := len(cats)
	if n == 0 {
		return nil, formatf("csv: no rows after the header")
	}

	var v Vocabulary
	if vocab != nil {
		v = Vocabulary{Levels: make([][]string, len(vocab.Levels)), Classes: slices.Clone(vocab.Classes)}
		for j := range vocab.Levels {
			v.Levels[j] = slices.Clone(vocab.Levels[j])
		}
	} else {
		v.Levels = make([][]string, len(catCols))
		for j := range catCols {
			v.Levels[j] = levels(cats, j)
		}
		v.Classes = levels(cats, len(catCols))
	}
	if len(v.Classes) < 2 {
		return nil, invalidf("csv: label column %q has %d classes, want at least 2", spec.Label, len(v.Classes))
	}
	if len(v.Classes) > 1<<24 {
		return nil, invalidf("csv: label column %q has %d classes, too many", spec.Label, len(v.Classes))
	}
	ids := make([]map[string]int, len(v.Levels)+1)
	for j, l := range append(slices.Clone(v.Levels), v.Classes) {
		ids[j] = make(map[string]int, len(l))
		for k, s := range l {
			if _, dup := ids[j][s]; dup {
				return nil, invalidf("csv: vocabulary repeats level %q", s)
			}
			ids[j][s] = k
		}
		if j < len(v.Levels) && len(l)+1 > 1<<24 {
			return nil, invalidf("csv: categorical column %q has %d levels, more than float32 ids hold exactly", spec.Categorical[j], len(l))
		}
	}

	x := make([]float32, n*F)
	y := make([]int, n)
	nn := len(numCols)
	for r := 0; r < n; r++ {
		copy(x[r*F:r*F+nn], nums[r*nn:(r+1)*nn])
		for j := range catCols {
			if k, ok := ids[j][cats[r][j]]; ok {
				x[r*F+nn+j] = float32(k + 1)
			}
		}
		if labelCol < 0 {
			continue
		}
		k, ok := ids[len(catCols)][cats[r][len(catCols)]]
		if !ok {
			return nil, formatf("csv: row %d: label %q is not one of the vocabulary's %d classes", r+1, cats[r][len(catCols)], len(v.Classes))
		}
		y[r] = k
	}
	ds, err := NewDataset(x, y, Shape{C: F, H: 1, W: 1}, len(v.Classes))
	if err != nil {
		return nil, invalidf("csv: %s", dpcore.Within("data", err))
	}
	ds.Name = "csv"
	ds.Owners = owners
	return &Tabular{Dataset: ds, Numeric: numNames, Categorical: slices.Clone(spec.Categorical), Vocab: v}, nil
}

// levels returns the distinct values of column j of rows, sorted
// numerically if all parse as numbers and lexically otherwise.
func levels(rows [][]string, j int) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range rows {
		if !seen[r[j]] {
			seen[r[j]] = true
			out = append(out, r[j])
		}
	}
	numeric := true
	for _, s := range out {
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			numeric = false
			break
		}
	}
	if numeric {
		slices.SortFunc(out, func(a, b string) int {
			fa, _ := strconv.ParseFloat(a, 64)
			fb, _ := strconv.ParseFloat(b, 64)
			if fa != fb {
				if fa < fb {
					return -1
				}
				return 1
			}
			return strings.Compare(a, b)
		})
	} else {
		slices.Sort(out)
	}
	return out
}

// csvErr turns encoding/csv's error into a one-line message.
func csvErr(err error) string {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("line %d column %d: %v", pe.StartLine, pe.Column, pe.Err)
	}
	return err.Error()
}
