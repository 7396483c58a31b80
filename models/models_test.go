package models

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

func TestCIFARCNNLayout(t *testing.T) {
	for _, c := range []struct {
		in    [3]int
		dense int
		total int
	}{
		// conv: 9*3*32+32, 9*32*32+32, 9*32*64+64, 9*64*64+64,
		// 9*64*128+128, 9*128*128+128; dense: d*128+128, 128*10+10.
		{[3]int{3, 32, 32}, 2048, 896 + 9248 + 18496 + 36928 + 73856 + 147584 + 2048*128 + 128 + 1290},
		{[3]int{1, 28, 28}, 1152, 320 + 9248 + 18496 + 36928 + 73856 + 147584 + 1152*128 + 128 + 1290},
	} {
		m, err := NewCIFARCNN(c.in, 10, 1)
		if err != nil {
			t.Fatal(err)
		}
		if m.NumParams() != c.total || len(m.Params()) != c.total {
			t.Errorf("%v: %d params, want %d", c.in, m.NumParams(), c.total)
		}
		lay := m.Layout()
		if len(lay) != 16 || lay[12].Shape[0] != c.dense {
			t.Errorf("%v: layout %v", c.in, lay)
		}
		off := 0
		for _, p := range lay {
			if p.Offset != off {
				t.Errorf("%s at %d, want %d", p.Name, p.Offset, off)
			}
			off += p.Len
		}
	}
	if _, err := NewCIFARCNN([3]int{3, 4, 4}, 10, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("4x4 input: error %v", err)
	}
}

// The small CNN on 28x28 images has the published network's layers
// without its stride-1 pools: 13x13x16 and 5x5x32 maps, so the dense layer
// sees 800 features.
func TestSmallCNNLayout(t *testing.T) {
	m, err := NewSmallCNN([3]int{1, 28, 28}, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	// conv: 8*8*1*16+16, 4*4*16*32+32; dense: 800*32+32, 32*10+10.
	const total = 1040 + 8224 + 25632 + 330
	if m.NumParams() != total {
		t.Errorf("%d params, want %d", m.NumParams(), total)
	}
	var shapes [][]int
	for _, p := range m.Layout() {
		shapes = append(shapes, p.Shape)
	}
	want := [][]int{{64, 16}, {16}, {256, 32}, {32}, {800, 32}, {32}, {32, 10}, {10}}
	if !slices.EqualFunc(shapes, want, slices.Equal) {
		t.Errorf("shapes %v, want %v", shapes, want)
	}
	if _, err := NewSmallCNN([3]int{1, 6, 6}, 10, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("6x6 input: error %v", err)
	}
	if _, err := NewSmallCNN([3]int{1, 28, 28}, 1, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("one class: error %v", err)
	}
}

func TestConstructorErrors(t *testing.T) {
	if _, err := NewLogistic([3]int{0, 2, 2}, 3, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Error(err)
	}
	if _, err := NewMLP([3]int{1, 2, 2}, []int{3}, 1, nn.Tanh, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Error(err)
	}
	if _, err := NewMLP([3]int{1, 2, 2}, []int{3}, 3, nn.Activation(99), 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Error(err)
	}
	if _, err := NewMLP([3]int{1, 2, 2}, []int{0}, 3, nn.ReLU, 1); !errors.Is(err, dpcore.ErrInvalid) {
		t.Error(err)
	}
}

func TestSaveLoad(t *testing.T) {
	a, _ := NewMLP([3]int{1, 3, 3}, []int{4}, 3, nn.Tanh, 1)
	b, _ := NewMLP([3]int{1, 3, 3}, []int{4}, 3, nn.Tanh, 2)
	if slices.Equal(a.Params(), b.Params()) {
		t.Fatal("different seeds gave equal parameters")
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	saved := buf.Bytes()
	if err := b.Load(bytes.NewReader(saved)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Params(), b.Params()) {
		t.Error("loaded parameters differ")
	}
	// A flipped bit in the parameter bytes fails the checksum and leaves
	// the model unchanged.
	bad := append([]byte(nil), saved...)
	bad[len(bad)-20] ^= 1
	c, _ := NewMLP([3]int{1, 3, 3}, []int{4}, 3, nn.Tanh, 3)
	before := append([]float32(nil), c.Params()...)
	if err := c.Load(bytes.NewReader(bad)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("corrupted checkpoint: error %v", err)
	}
	if !slices.Equal(before, c.Params()) {
		t.Error("failed load changed parameters")
	}
	other, _ := NewMLP([3]int{1, 3, 3}, []int{5}, 3, nn.Tanh, 1)
	if err := other.Load(bytes.NewReader(saved)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("other architecture: error %v", err)
	}
	if err := other.Load(bytes.NewReader(saved[:10])); err == nil {
		t.Error("truncated checkpoint loaded")
	}
}
