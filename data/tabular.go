package data

import (
	"bufio"
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
	// Unknown counts, per categorical column, the rows whose value is not
	// one of a given vocabulary's levels (read as the unknown id 0); nil
	// when the vocabulary was taken from the file.
	Unknown []int
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
//
// The steps: read the header, give every column its role, read the rows,
// fix the vocabulary, encode the rows as features and labels.
//
// A UTF-8 byte-order mark at the start (Excel writes one) is skipped.
func ReadCSV(r io.Reader, spec TabularSpec, vocab *Vocabulary) (*Tabular, error) {
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3)
	}
	cr := csv.NewReader(br)
	if spec.Comma != 0 {
		cr.Comma = spec.Comma
	}
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // ragged rows get our own message
	header, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	lay, err := layoutColumns(header, spec, vocab)
	if err != nil {
		return nil, err
	}
	rows, err := lay.readRows(cr, spec)
	if err != nil {
		return nil, err
	}
	v, ids, err := lay.vocabulary(rows.cats, spec, vocab)
	if err != nil {
		return nil, err
	}
	x, y, unknown, err := lay.encode(rows, ids, len(v.Classes))
	if err != nil {
		return nil, err
	}
	ds, err := NewDataset(x, y, Shape{C: lay.features(), H: 1, W: 1}, len(v.Classes))
	if err != nil {
		return nil, invalidf("csv: %s", dpcore.Within("data", err))
	}
	ds.Name = "csv"
	ds.Owners = rows.owners
	t := &Tabular{Dataset: ds, Numeric: lay.numNames, Categorical: slices.Clone(spec.Categorical), Vocab: v}
	if vocab != nil {
		t.Unknown = unknown
	}
	return t, nil
}

// readHeader reads the header row: trimmed names, none empty or repeated.
func readHeader(cr *csv.Reader) ([]string, error) {
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, formatf("csv: empty file, want a header row")
	}
	if err != nil {
		return nil, formatf("csv: header: %v", csvErr(err))
	}
	header = slices.Clone(header)
	seen := make(map[string]bool, len(header))
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		if h == "" {
			return nil, formatf("csv: header column %d has no name", i+1)
		}
		if seen[h] {
			return nil, formatf("csv: header names column %q twice", h)
		}
		seen[h] = true
	}
	return header, nil
}

// csvLayout is what each column of a table is: the label, the
// categorical and numeric features, the user id, or ignored.
type csvLayout struct {
	header   []string
	labelCol int // -1: no label read
	userCol  int // -1: no user column
	catCols  []int
	numCols  []int
	numNames []string
}

func (l *csvLayout) features() int { return len(l.numCols) + len(l.catCols) }

// columnRoles names the role of every column: 'n'umeric (the default),
// 'N'umeric by name, 'c'ategorical, 'l'abel, 'i'gnored, 'u'ser.
type columnRoles struct {
	header []string
	col    map[string]int
	role   []byte
}

func newColumnRoles(header []string) *columnRoles {
	t := &columnRoles{header: header, col: make(map[string]int, len(header)), role: make([]byte, len(header))}
	for i, h := range header {
		t.col[h] = i
		t.role[i] = 'n'
	}
	return t
}

// find is the index of the column name has the role what.
func (t *columnRoles) find(what, name string) (int, error) {
	i, ok := t.col[name]
	if !ok {
		return 0, invalidf("csv: %s column %q is not in the header %q", what, name, t.header)
	}
	return i, nil
}

// assign gives the named columns the role r and returns their indices.
func (t *columnRoles) assign(what string, names []string, r byte) ([]int, error) {
	cols := make([]int, len(names))
	for j, name := range names {
		i, err := t.find(what, name)
		if err != nil {
			return nil, err
		}
		if t.role[i] != 'n' {
			return nil, invalidf("csv: column %q given two roles", name)
		}
		t.role[i], cols[j] = r, i
	}
	return cols, nil
}

// layoutColumns gives every column of header its role from spec.
func layoutColumns(header []string, spec TabularSpec, vocab *Vocabulary) (*csvLayout, error) {
	t := newColumnRoles(header)
	lay := &csvLayout{header: header, labelCol: -1, userCol: -1}
	switch {
	case spec.NoLabel:
		if vocab == nil {
			return nil, invalidf("csv: rows without labels need the vocabulary of the model's training data")
		}
		if i, ok := t.col[spec.Label]; ok {
			t.role[i] = 'i'
		}
	case spec.Label == "":
		return nil, invalidf("csv: no label column named")
	default:
		cols, err := t.assign("label", []string{spec.Label}, 'l')
		if err != nil {
			return nil, err
		}
		lay.labelCol = cols[0]
	}
	var err error
	if lay.catCols, err = t.assign("categorical", spec.Categorical, 'c'); err != nil {
		return nil, err
	}
	if _, err := t.assign("ignored", spec.Ignore, 'i'); err != nil {
		return nil, err
	}
	if spec.User != "" {
		uc, err := t.assign("user", []string{spec.User}, 'u')
		if err != nil {
			return nil, err
		}
		lay.userCol = uc[0]
	}
	if spec.Numeric != nil {
		if lay.numCols, err = t.assign("numeric", spec.Numeric, 'N'); err != nil {
			return nil, err
		}
		lay.numNames = slices.Clone(spec.Numeric)
	} else {
		for i, r := range t.role {
			if r == 'n' {
				lay.numCols = append(lay.numCols, i)
				lay.numNames = append(lay.numNames, header[i])
			}
		}
	}
	if vocab != nil && len(vocab.Levels) != len(lay.catCols) {
		return nil, invalidf("csv: vocabulary has %d categorical columns, spec names %d", len(vocab.Levels), len(lay.catCols))
	}
	if lay.features() == 0 {
		return nil, invalidf("csv: no feature columns besides the label")
	}
	return lay, nil
}

// csvRows are a table's rows as read: the numeric features, the raw
// categorical values and label of each row, and each row's owner.
type csvRows struct {
	nums   []float32
	cats   [][]string // per row, raw categorical values then the label
	owners []int64
}

// readRows reads the rows after the header, checking each against the
// layout (field count, finite numbers, labels and user ids present).
func (l *csvLayout) readRows(cr *csv.Reader, spec TabularSpec) (*csvRows, error) {
	rows := &csvRows{}
	ownerID := map[string]int64{}
	F := l.features()
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, formatf("csv: %v", csvErr(err))
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(l.header) {
			return nil, formatf("csv: line %d has %d fields, the header has %d", line, len(rec), len(l.header))
		}
		if (len(rows.cats)+1)*F > maxTabularCells {
			return nil, invalidf("csv: more than %d feature values (%d MiB as float32): too large to hold in memory", maxTabularCells, maxTabularCells*4>>20)
		}
		for _, i := range l.numCols {
			s := strings.TrimSpace(rec[i])
			v, perr := strconv.ParseFloat(s, 64)
			if perr != nil || math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
				return nil, formatf("csv: line %d column %q: %q is not a finite number", line, l.header[i], s)
			}
			rows.nums = append(rows.nums, float32(v))
		}
		row := make([]string, len(l.catCols)+1)
		for j, i := range l.catCols {
			row[j] = strings.TrimSpace(rec[i])
		}
		if l.labelCol >= 0 {
			row[len(l.catCols)] = strings.TrimSpace(rec[l.labelCol])
			if row[len(l.catCols)] == "" {
				return nil, formatf("csv: line %d: empty label", line)
			}
		}
		rows.cats = append(rows.cats, row)
		if l.userCol >= 0 {
			u := strings.TrimSpace(rec[l.userCol])
			if u == "" {
				return nil, formatf("csv: line %d: empty user id in column %q", line, spec.User)
			}
			id, ok := ownerID[u]
			if !ok {
				id = int64(len(ownerID))
				ownerID[u] = id
			}
			rows.owners = append(rows.owners, id)
		}
	}
	if len(rows.cats) == 0 {
		return nil, formatf("csv: no rows after the header")
	}
	return rows, nil
}

// vocabulary is vocab (copied) or the levels and classes found in cats,
// with the id of every level and class: ids[j] for categorical column j,
// ids[len(catCols)] for the label.
func (l *csvLayout) vocabulary(cats [][]string, spec TabularSpec, vocab *Vocabulary) (Vocabulary, []map[string]int, error) {
	var v Vocabulary
	if vocab != nil {
		v = Vocabulary{Levels: make([][]string, len(vocab.Levels)), Classes: slices.Clone(vocab.Classes)}
		for j := range vocab.Levels {
			v.Levels[j] = slices.Clone(vocab.Levels[j])
		}
	} else {
		v.Levels = make([][]string, len(l.catCols))
		for j := range l.catCols {
			v.Levels[j] = levels(cats, j)
		}
		v.Classes = levels(cats, len(l.catCols))
	}
	if len(v.Classes) < 2 {
		return v, nil, invalidf("csv: label column %q has %d classes, want at least 2", spec.Label, len(v.Classes))
	}
	if len(v.Classes) > 1<<24 {
		return v, nil, invalidf("csv: label column %q has %d classes, too many", spec.Label, len(v.Classes))
	}
	ids := make([]map[string]int, len(v.Levels)+1)
	for j, lv := range append(slices.Clone(v.Levels), v.Classes) {
		ids[j] = make(map[string]int, len(lv))
		for k, s := range lv {
			if _, dup := ids[j][s]; dup {
				return v, nil, invalidf("csv: vocabulary repeats level %q", s)
			}
			ids[j][s] = k
		}
		if j < len(v.Levels) && len(lv)+1 > 1<<24 {
			return v, nil, invalidf("csv: categorical column %q has %d levels, more than float32 ids hold exactly", spec.Categorical[j], len(lv))
		}
	}
	return v, ids, nil
}

// encode lays the rows out as features (numeric, then categorical ids:
// 0 unknown, l+1 for level l) and labels (class ids).
// unknown counts, per categorical column, the values not in ids.
func (l *csvLayout) encode(rows *csvRows, ids []map[string]int, classes int) (x []float32, y []int, unknown []int, err error) {
	n, F, nn := len(rows.cats), l.features(), len(l.numCols)
	x = make([]float32, n*F)
	y = make([]int, n)
	unknown = make([]int, len(l.catCols))
	for r := 0; r < n; r++ {
		copy(x[r*F:r*F+nn], rows.nums[r*nn:(r+1)*nn])
		for j := range l.catCols {
			if k, ok := ids[j][rows.cats[r][j]]; ok {
				x[r*F+nn+j] = float32(k + 1)
			} else {
				unknown[j]++
			}
		}
		if l.labelCol < 0 {
			continue
		}
		label := rows.cats[r][len(l.catCols)]
		k, ok := ids[len(l.catCols)][label]
		if !ok {
			return nil, nil, nil, formatf("csv: row %d: label %q is not one of the vocabulary's %d classes", r+1, label, classes)
		}
		y[r] = k
	}
	return x, y, unknown, nil
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
