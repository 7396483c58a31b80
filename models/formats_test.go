package models

import (
	"math"
	"os"
	"reflect"
	"testing"
)

// Files written by the release at commit 3258d09 (testdata/formats) still
// load to what was saved: the format tests of issue 25. The model file
// holds fileTestModels(t)[6] (customResidual, every image layer kind) with
// testMeta; the state file is what Model.Save wrote for
// fileTestModels(t)[5] (the tabular model) inside a checkpoint.

func sameParams(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: parameter %d = %v, want %v", what, i, got[i], want[i])
		}
	}
}

func TestFormatModelFile3258d09(t *testing.T) {
	tr, err := ReadFile("testdata/formats/model-v2-3258d09.dpmf")
	if err != nil {
		t.Fatal(err)
	}
	want := fileTestModels(t)[6]
	sameParams(t, "model file", tr.Model.Params(), want.Params())
	if !reflect.DeepEqual(tr.Metadata, testMeta) {
		t.Fatalf("metadata %+v, want %+v", tr.Metadata, testMeta)
	}
	if !reflect.DeepEqual(tr.Architecture, want.(Architected).Architecture()) {
		t.Fatalf("architecture %+v", tr.Architecture)
	}
}

func TestFormatModelState3258d09(t *testing.T) {
	f, err := os.Open("testdata/formats/model-state-3258d09.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := fileTestModels(t)[5]
	m, err := NewTabular(2, []int{4, 3}, 3, []int{8}, 3, 99)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(f); err != nil {
		t.Fatal(err)
	}
	sameParams(t, "model state", m.Params(), want.Params())
}
