package models

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/safetensors"
)

func exportBytes(t *testing.T, m Model, dt safetensors.DType) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSafetensors(&b, m, testMeta, dt); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSafetensorsRoundTrip: every test model exports as F32 and imports
// with the same architecture, metadata and parameter bits, and saves to
// the same model file bytes as the original.
func TestSafetensorsRoundTrip(t *testing.T) {
	for _, m := range fileTestModels(t) {
		b := exportBytes(t, m, safetensors.F32)
		tr, err := ReadSafetensors(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
		if !reflect.DeepEqual(tr.Architecture, m.(Architected).Architecture()) || !reflect.DeepEqual(tr.Metadata, testMeta) {
			t.Fatalf("%s: read back %+v %+v", m.Name(), tr.Architecture, tr.Metadata)
		}
		for i, v := range m.Params() {
			if math.Float32bits(tr.Model.Params()[i]) != math.Float32bits(v) {
				t.Fatalf("%s: parameter %d: %v, exported %v", m.Name(), i, tr.Model.Params()[i], v)
			}
		}
		var orig, back bytes.Buffer
		if err := Save(&orig, m, testMeta); err != nil {
			t.Fatal(err)
		}
		if err := Save(&back, tr.Model, tr.Metadata); err != nil || !bytes.Equal(orig.Bytes(), back.Bytes()) {
			t.Fatalf("%s: model file after the round trip differs (%v)", m.Name(), err)
		}
	}
}

// TestSafetensorsHalf: F16 and BF16 exports import with every parameter
// rounded to the nearest representable value (relative error at most
// 2^-11 and 2^-8 in the normal range).
func TestSafetensorsHalf(t *testing.T) {
	m := fileTestModels(t)[1]
	for _, c := range []struct {
		dt  safetensors.DType
		rel float64
	}{{safetensors.F16, 1.0 / 2048}, {safetensors.BF16, 1.0 / 256}} {
		b := exportBytes(t, m, c.dt)
		tr, err := ReadSafetensors(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		changed := 0
		for i, v := range m.Params() {
			g := tr.Model.Params()[i]
			if math.Abs(float64(v)) > 1.0/(1<<14) && math.Abs(float64(g-v)) > c.rel*math.Abs(float64(v)) {
				t.Fatalf("%v: parameter %d: %v, exported %v", c.dt, i, g, v)
			}
			if g != v {
				changed++
			}
		}
		if changed == 0 {
			t.Errorf("%v: no parameter was rounded", c.dt)
		}
	}
}

// TestSafetensorsPyTorchLayout: the exported tensors, read in PyTorch's
// conventions (nn.Conv2d weight (out, in, kh, kw), cross-correlation with
// zero padding; torch.flatten in CHW order; nn.Linear weight (out, in),
// y = x W^T + b), compute by a direct loop the logits the model computes.
func TestSafetensorsPyTorchLayout(t *testing.T) {
	const C, H, K, S, P, O, N = 2, 5, 3, 2, 1, 3, 4
	b := NewBuilder("layout", [3]int{C, H, H}, 3)
	m, err := b.Conv2D("conv", O, K, S, P, nn.Identity).Dense("f/c", N, nn.Identity).Model()
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Params() {
		m.Params()[i] += float32(i%7) * 0.01 // nonzero biases
	}
	raw := exportBytes(t, m, safetensors.F32)
	f, err := safetensors.Open(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string, shape ...int) []float32 {
		ti, ok := f.Lookup(name)
		if !ok || !reflect.DeepEqual(ti.Shape, shape) {
			t.Fatalf("%s: %+v, want shape %v", name, ti, shape)
		}
		v, err := f.Float32s(ti)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const HO = (H+2*P-K)/S + 1
	cw, cb := get("conv.weight", O, C, K, K), get("conv.bias", O)
	fw, fb := get("f/c.weight", N, O*HO*HO), get("f/c.bias", N)
	x := randInputs(m, 1, 5)
	feat := make([]float64, O*HO*HO)
	for o := range O {
		for y := range HO {
			for z := range HO {
				s := float64(cb[o])
				for c := range C {
					for kr := range K {
						for kc := range K {
							iy, iz := y*S+kr-P, z*S+kc-P
							if iy >= 0 && iy < H && iz >= 0 && iz < H {
								s += float64(cw[((o*C+c)*K+kr)*K+kc]) * float64(x[(c*H+iy)*H+iz])
							}
						}
					}
				}
				feat[(o*HO+y)*HO+z] = s
			}
		}
	}
	plan, err := nn.NewPlan(m.Network(), m.Params(), nn.Options{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, N)
	if err := plan.Forward(x, logits); err != nil {
		t.Fatal(err)
	}
	for n := range N {
		s := float64(fb[n])
		for i, v := range feat {
			s += float64(fw[n*len(feat)+i]) * v
		}
		if math.Abs(s-float64(logits[n])) > 1e-5*(1+math.Abs(s)) {
			t.Errorf("logit %d: PyTorch layout %v, model %v", n, s, logits[n])
		}
	}
}

func TestExportName(t *testing.T) {
	for in, want := range map[string]string{"dense0/w": "dense0.weight", "conv1/b": "conv1.bias", "emb/table2": "emb.tables.2.weight", "inner.norm/w": "inner.norm.weight", "a/b/w": "a/b.weight", "x": "x"} {
		if got := ExportName(in); got != want {
			t.Errorf("ExportName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSafetensorsImportRefuses: files that are not this model's
// parameters are refused with one line each.
func TestSafetensorsImportRefuses(t *testing.T) {
	m := fileTestModels(t)[1]
	a := m.(Architected).Architecture()
	archJSON, _ := json.Marshal(a)
	good := func() ([]safetensors.Tensor, map[string]string) {
		raw := exportBytes(t, m, safetensors.F32)
		f, err := safetensors.Open(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			t.Fatal(err)
		}
		var ts []safetensors.Tensor
		for _, ti := range f.Tensors {
			v, _ := f.Float32s(ti)
			ts = append(ts, safetensors.Tensor{Name: ti.Name, Shape: ti.Shape, Data: v})
		}
		return ts, f.Metadata
	}
	for _, c := range []struct {
		name string
		edit func([]safetensors.Tensor, map[string]string) []safetensors.Tensor
		want string
	}{
		{"no architecture", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			delete(md, SafetensorsArchKey)
			return ts
		}, `has no "dpmf.architecture"`},
		{"architecture not JSON", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			md[SafetensorsArchKey] = "{"
			return ts
		}, "unexpected end of JSON"},
		{"huge architecture", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			md[SafetensorsArchKey] = strings.Replace(string(archJSON), `"out":`, `"out":100000`, 1)
			return ts
		}, "over the limit"},
		{"missing tensor", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			return ts[1:]
		}, "which the file lacks"},
		{"extra tensor", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			return append(ts, safetensors.Tensor{Name: "extra", Shape: []int{1}, Data: []float32{1}})
		}, `tensor "extra" is not a parameter`},
		{"wrong shape", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			ts[0].Shape = []int{ts[0].Shape[1], ts[0].Shape[0]}
			return ts
		}, "needs ["},
		{"NaN", func(ts []safetensors.Tensor, md map[string]string) []safetensors.Tensor {
			ts[1].Data[0] = float32(math.NaN())
			return ts
		}, "element 0 is NaN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, md := good()
			ts = c.edit(ts, md)
			var b bytes.Buffer
			if err := safetensors.Write(&b, ts, md); err != nil {
				t.Fatal(err)
			}
			_, err := ReadSafetensors(bytes.NewReader(b.Bytes()), int64(b.Len()))
			if err == nil || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line with %q", err, c.want)
			}
		})
	}
	// Not safetensors at all: the format's error.
	if _, err := ReadSafetensors(bytes.NewReader([]byte("not a file")), 10); !errors.Is(err, safetensors.ErrFormat) {
		t.Errorf("garbage: %v", err)
	}
}
