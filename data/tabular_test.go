package data

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

const tinyCSV = `age, city ,income,id,label
30,paris,1.5,a,yes
41,oslo,-2,b,no
25,paris,0.25,c,yes
`

func TestReadCSV(t *testing.T) {
	tab, err := ReadCSV(strings.NewReader(tinyCSV), TabularSpec{Label: "label", Categorical: []string{"city"}, Ignore: []string{"id"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tab.Numeric, []string{"age", "income"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("numeric columns %q, want %q", got, want)
	}
	if tab.Shape != (Shape{3, 1, 1}) || tab.Classes != 2 || tab.Len() != 3 {
		t.Fatalf("shape %v classes %d len %d", tab.Shape, tab.Classes, tab.Len())
	}
	// city levels sorted: oslo=1, paris=2; classes sorted: no=0, yes=1.
	want := []float32{30, 1.5, 2, 41, -2, 1, 25, 0.25, 2}
	for i, v := range want {
		if tab.X[i] != v {
			t.Fatalf("X = %v, want %v", tab.X, want)
		}
	}
	if tab.Y[0] != 1 || tab.Y[1] != 0 || tab.Y[2] != 1 {
		t.Errorf("Y = %v", tab.Y)
	}
	if c := tab.Cardinalities(); len(c) != 1 || c[0] != 3 {
		t.Errorf("cardinalities %v, want [3]", c)
	}

	// A test file read with the training vocabulary: unseen city -> id 0.
	test, err := ReadCSV(strings.NewReader("age,city,income,id,label\n50,rome,1,z,no\n"), TabularSpec{Label: "label", Categorical: []string{"city"}, Ignore: []string{"id"}}, &tab.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if test.X[2] != 0 || test.Y[0] != 0 || test.Classes != 2 {
		t.Errorf("test encoding X=%v Y=%v classes=%d", test.X, test.Y, test.Classes)
	}
	if _, err := ReadCSV(strings.NewReader("age,city,income,id,label\n50,rome,1,z,maybe\n"), TabularSpec{Label: "label", Categorical: []string{"city"}, Ignore: []string{"id"}}, &tab.Vocab); !errors.Is(err, ErrFormat) {
		t.Errorf("unknown label with a fixed vocabulary: %v", err)
	}
}

func TestReadCSVNumericLabelsSortNumerically(t *testing.T) {
	tab, err := ReadCSV(strings.NewReader("x,y\n1,10\n2,9\n3,2\n"), TabularSpec{Label: "y"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tab.Vocab.Classes, ",") != "2,9,10" || tab.Y[0] != 2 || tab.Y[2] != 0 {
		t.Errorf("classes %q Y %v", tab.Vocab.Classes, tab.Y)
	}
}

func TestReadCSVErrors(t *testing.T) {
	spec := TabularSpec{Label: "y", Categorical: []string{"c"}}
	for _, tc := range []struct {
		name, in string
		spec     TabularSpec
		want     error
		msg      string
	}{
		{"empty", "", spec, ErrFormat, "empty file"},
		{"no rows", "x,c,y\n", spec, ErrFormat, "no rows"},
		{"ragged", "x,c,y\n1,a,0\n2,b\n", spec, ErrFormat, "line 3 has 2 fields, the header has 3"},
		{"non-numeric", "x,c,y\n1,a,0\nabc,b,1\n", spec, ErrFormat, `line 3 column "x": "abc" is not a finite number`},
		{"empty numeric", "x,c,y\n,a,0\n2,b,1\n", spec, ErrFormat, `line 2 column "x"`},
		{"nan", "x,c,y\nNaN,a,0\n2,b,1\n", spec, ErrFormat, "not a finite number"},
		{"inf", "x,c,y\n1e400,a,0\n2,b,1\n", spec, ErrFormat, "not a finite number"},
		{"float32 overflow", "x,c,y\n1e39,a,0\n2,b,1\n", spec, ErrFormat, "not a finite number"},
		{"empty label", "x,c,y\n1,a,\n2,b,1\n", spec, ErrFormat, "empty label"},
		{"one class", "x,c,y\n1,a,0\n2,b,0\n", spec, dpcore.ErrInvalid, "1 classes"},
		{"missing label column", "x,c,z\n1,a,0\n", spec, dpcore.ErrInvalid, `label column "y" is not in the header`},
		{"missing categorical", "x,d,y\n1,a,0\n", spec, dpcore.ErrInvalid, `categorical column "c"`},
		{"duplicate header", "x,x,y\n1,2,0\n", TabularSpec{Label: "y"}, ErrFormat, `names column "x" twice`},
		{"two roles", "x,c,y\n1,a,0\n", TabularSpec{Label: "y", Categorical: []string{"y"}}, dpcore.ErrInvalid, "two roles"},
		{"no label named", "x,y\n1,0\n", TabularSpec{}, dpcore.ErrInvalid, "no label column"},
		{"no features", "y\n1\n0\n", TabularSpec{Label: "y"}, dpcore.ErrInvalid, "no feature columns"},
		{"bad quote", "x,c,y\n1,\"a,0\n", spec, ErrFormat, "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.in), tc.spec, nil)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tc.want, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") || !strings.HasPrefix(err.Error(), "data: ") || strings.Count(err.Error(), "data:") != 1 {
				t.Errorf("error is not one line with one prefix: %q", err)
			}
		})
	}
}

func FuzzReadCSV(f *testing.F) {
	f.Add(tinyCSV)
	f.Add("x,c,y\n1,a,0\n2,b\n")
	f.Add("x,c,y\n\"1\",a,0\n2,b,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		tab, err := ReadCSV(strings.NewReader(in), TabularSpec{Label: "y", Categorical: []string{"c"}}, nil)
		if err != nil {
			if !errors.Is(err, ErrFormat) && !errors.Is(err, dpcore.ErrInvalid) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		for _, v := range tab.X {
			if v-v != 0 {
				t.Fatalf("non-finite feature from %q", in)
			}
		}
	})
}

// TestReadCSVModelColumns: a file read with the columns and vocabulary a
// model was trained on gets the same encoding whatever its column order
// and extra columns, and rows without labels read as inputs.
func TestReadCSVModelColumns(t *testing.T) {
	spec := TabularSpec{Label: "label", Categorical: []string{"city"}, Ignore: []string{"id"}}
	tab, err := ReadCSV(strings.NewReader(tinyCSV), spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	model := TabularSpec{Label: "label", Categorical: tab.Categorical, Numeric: tab.Numeric}
	again, err := ReadCSV(strings.NewReader("note,income,label,city,age\nx,1.5,yes,paris,30\ny,-2,no,oslo,41\n"), model, &tab.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.X, tab.X[:6]) || !slices.Equal(again.Y, tab.Y[:2]) || !slices.Equal(again.Numeric, tab.Numeric) {
		t.Fatalf("reordered file: X %v Y %v, want %v %v", again.X, again.Y, tab.X[:6], tab.Y[:2])
	}
	model.NoLabel = true
	in, err := ReadCSV(strings.NewReader("age,city,income\n25,paris,0.25\n"), model, &tab.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(in.X, tab.X[6:]) || in.Y[0] != 0 || in.Classes != 2 {
		t.Fatalf("unlabeled: X %v Y %v classes %d", in.X, in.Y, in.Classes)
	}
	if _, err := ReadCSV(strings.NewReader("age,city\n25,paris\n"), model, &tab.Vocab); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), `numeric column "income" is not in the header`) {
		t.Fatalf("missing numeric column: %v", err)
	}
	if _, err := ReadCSV(strings.NewReader("age,city,income\n25,paris,0.25\n"), model, nil); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "need the vocabulary") {
		t.Fatalf("unlabeled without a vocabulary: %v", err)
	}
}
