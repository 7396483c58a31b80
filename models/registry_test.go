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

// Named.Groups sets the GroupNorm groups of scatternet and wrn16-4 (0
// keeps their defaults, 27 and 16), and a count that does not divide the
// channels is refused by name.
func TestNamedGroups(t *testing.T) {
	var walk func(ls []LayerSpec, g []int) []int
	walk = func(ls []LayerSpec, g []int) []int {
		for _, l := range ls {
			if l.Kind == GroupNormLayer {
				g = append(g, l.Groups)
			}
			g = walk(l.Shortcut, walk(l.Body, g))
		}
		return g
	}
	groupsOf := func(m Model) []int { return walk(m.(Architected).Architecture().Layers, nil) }
	for _, c := range []struct {
		name   string
		in     [3]int
		groups int
		want   int
	}{
		{"scatternet", [3]int{81, 2, 2}, 0, ScatterNetGroups},
		{"scatternet", [3]int{81, 2, 2}, 81, 81},
		{"scatternet", [3]int{81, 2, 2}, 1, 1},
		{"wrn16-4", [3]int{3, 8, 8}, 0, wrnGroups},
		{"wrn16-4", [3]int{3, 8, 8}, 4, 4},
	} {
		m, err := Named{Name: c.name, Groups: c.groups}.Build(c.in, 3, 1)
		if err != nil {
			t.Fatalf("%s groups %d: %v", c.name, c.groups, err)
		}
		g := groupsOf(m)
		if len(g) == 0 {
			t.Fatalf("%s: no GroupNorm layer", c.name)
		}
		for _, v := range g {
			if v != c.want {
				t.Errorf("%s groups %d: a GroupNorm layer has %d groups, want %d", c.name, c.groups, v, c.want)
			}
		}
	}
	_, err := Named{Name: "scatternet", Groups: 10}.Build([3]int{81, 2, 2}, 3, 1)
	if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "10 groups must divide 81 channels") {
		t.Fatalf("10 groups of 81 channels: %v", err)
	}
	if !GroupNormed("scatternet") || !GroupNormed("wrn16-4") || GroupNormed("mlp") {
		t.Error("GroupNormed: want scatternet and wrn16-4 only")
	}
}
