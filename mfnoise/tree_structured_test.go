package mfnoise

import (
	"context"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
)

// TestTreeOnlineStructuredMatchesDense: the structured row norms and
// sensitivity of tree-online equal the dense mechanism's (1e-12) for every
// n up to 70 and a few beyond, including completion at every padding.
func TestTreeOnlineStructuredMatchesDense(t *testing.T) {
	ns := []int{}
	for n := 1; n <= 70; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 100, 127, 128, 129, 200)
	spec := Tree{Decoder: TreeOnline}
	for _, n := range ns {
		w, _ := dpcore.PrefixSum(n)
		schemas := []dpcore.Schema{dpcore.SingleParticipation()}
		for _, b := range []int{1, 3, 7} {
			if k := (n + b - 1) / b; b <= n {
				schema, _ := dpcore.KBParticipation(k, b)
				schemas = append(schemas, schema)
			}
		}
		st, err := spec.Build(context.Background(), w, dpcore.SingleParticipation(), BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f := st.(*Factorization)
		r, err := treeOnlineRowNorms(n)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range r {
			row := f.Decoder.RawRowView(i)
			if mftest.RelErr(v, dot(row, row)) > 1e-12 {
				t.Fatalf("n = %d: ||B[%d,:]||^2 = %v, dense %v", n, i, v, dot(row, row))
			}
		}
		for _, schema := range schemas {
			got, err := treeSensitivity(n, schema)
			if err != nil {
				t.Fatal(err)
			}
			row, err := scoreStrategy("tree-online", f, schema)
			if err != nil {
				t.Fatal(err)
			}
			want := dpcore.SensitivityResult{Value: row.Sensitivity, Exact: row.SensitivityExact, Method: row.SensitivityMethod}
			if mftest.RelErr(got.Value, want.Value) > 1e-12 || got.Exact != want.Exact {
				t.Fatalf("n = %d %s: sens %+v, dense %+v", n, schema, got, want)
			}
		}
	}
}

// TestTreeOnlineLargeN: compare ranks tree-online at n = 50000 (dense:
// 93 GiB) and refuses min-sep there with one line.
func TestTreeOnlineLargeN(t *testing.T) {
	w, _ := dpcore.PrefixSum(50_000)
	specs := named(t, "tree-online,sqrt")
	kb, _ := dpcore.KBParticipation(50, 1000)
	rows, err := Compare(context.Background(), w, kb, specs, BuildOptions{})
	if err != nil || len(rows) != 2 {
		t.Fatal(rows, err)
	}
	ms, _ := dpcore.MinSepParticipation(50, 1000)
	if _, err := Compare(context.Background(), w, ms, specs, BuildOptions{}); err == nil {
		t.Fatal("min-sep tree at n = 50000 accepted")
	}
}
