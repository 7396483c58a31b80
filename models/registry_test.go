package models

import (
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// The registry builds every name it lists, for a 1x4x4 input with one
// categorical column (the last feature, 3 levels), and refuses others
// naming the known ones; EstimateParams counts the dense models exactly.
func TestNamedRegistry(t *testing.T) {
	for _, name := range Names() {
		n := Named{Name: name, Hidden: []int{5}, Categorical: []int{3}}
		in := [3]int{1, 4, 4}
		switch name {
		case "tabular":
			in = [3]int{4, 1, 1}
		case "cnn", "wrn16-4":
			in = [3]int{3, 8, 8}
		case "cnn-small":
			in = [3]int{1, 14, 14}
		case "scatternet":
			in = [3]int{81, 2, 2}
		}
		m, err := n.Build(in, 3, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if est := n.EstimateParams(in[0]*in[1]*in[2], 3); est != 0 && est != float64(m.NumParams()) {
			t.Errorf("%s: estimated %v parameters, built %d", name, est, m.NumParams())
		}
		if !Known(name) {
			t.Errorf("%s not known", name)
		}
	}
	_, err := Named{Name: "resnet"}.Build([3]int{1, 4, 4}, 3, 1)
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "want logistic, mlp, cnn, cnn-small, wrn16-4, tabular or scatternet") {
		t.Fatalf("unknown name: %v", err)
	}
}
