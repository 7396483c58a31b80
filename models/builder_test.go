package models

import (
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

func TestBuilderErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		b    *Builder
		want string
	}{
		{"kernel too large", NewBuilder("m", [3]int{1, 4, 4}, 1).Conv2D("big", 2, 7, 1, 0, nn.ReLU).Dense("", 2, nn.Identity), "layer big on a 1x4x4 input"},
		{"groups", NewBuilder("m", [3]int{6, 4, 4}, 1).GroupNorm("gn", 4).Dense("", 2, nn.Identity), "4 groups do not divide 6 channels"},
		{"batchnorm", NewBuilder("m", [3]int{3, 4, 4}, 1).BatchNorm().Dense("", 2, nn.Identity), "use GroupNorm"},
		{"residual shapes", NewBuilder("m", [3]int{3, 4, 4}, 1).Residual(func(r *Builder) { r.Conv2D("c", 5, 3, 1, 1, nn.ReLU) }, nil).Dense("", 2, nn.Identity), "body ends at 5x4x4, shortcut at 3x4x4"},
		{"duplicate name", NewBuilder("m", [3]int{3, 4, 4}, 1).Dense("d", 4, nn.ReLU).Dense("d", 2, nn.Identity), `parameter name "d/w" used twice`},
		{"not logits", NewBuilder("m", [3]int{3, 4, 4}, 1).Conv2D("", 2, 3, 1, 1, nn.ReLU), "is not a vector"},
		{"bad input", NewBuilder("m", [3]int{0, 4, 4}, 1).Dense("", 2, nn.Identity), "input shape"},
	} {
		_, err := c.b.Model()
		if !errors.Is(err, dpcore.ErrInvalid) && !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: error %v, want invalid argument", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "models: m: ") {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestWRN16x4(t *testing.T) {
	m, err := NewWRN16x4([3]int{3, 32, 32}, 10, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Stem 3*9*16+16; group 1: block 1 (16 -> 64, 1x1 shortcut), block 2;
	// groups 2 and 3 likewise with strides 2; norms 2 per channel.
	conv := func(k, in, out int) int { return k*k*in*out + out }
	gn := func(c int) int { return 2 * c }
	want := conv(3, 3, 16)
	in := 16
	for _, w := range []int{64, 128, 256} {
		want += gn(in) + conv(3, in, w) + gn(w) + conv(3, w, w) + conv(1, in, w)
		want += gn(w) + conv(3, w, w) + gn(w) + conv(3, w, w)
		in = w
	}
	want += gn(256) + 256*10 + 10
	if m.NumParams() != want {
		t.Errorf("%d parameters, want %d", m.NumParams(), want)
	}
	t.Logf("wrn16-4: %d parameters", m.NumParams())
	plan, err := nn.NewPlan(m.Network(), m.Params(), nn.Options{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 2*3*32*32)
	for i := range x {
		x[i] = float32(i%17) / 17
	}
	g := make([]float32, m.NumParams())
	losses, err := plan.Step(x, []int{3, 7}, g, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range losses {
		if !(l > 0) {
			t.Errorf("loss %v", l)
		}
	}
	if _, err := NewWRN16x4([3]int{3, 32, 32}, 10, 5, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("5 groups: error %v", err)
	}
}
