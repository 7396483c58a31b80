package models

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/safetensors"
)

// Keys of the safetensors metadata that WriteSafetensors records and
// ReadSafetensors needs: the architecture and the model file's metadata
// (dataset, privacy claim, ...) as JSON. "format": "pt" is the key Hugging
// Face's loaders look for.
const (
	SafetensorsArchKey = "dpmf.architecture"
	SafetensorsMetaKey = "dpmf.metadata"
)

// ExportName is the safetensors name of a parameter tensor, in PyTorch's
// naming: a layer's "<layer>/w" is "<layer>.weight", "<layer>/b" is
// "<layer>.bias", and an embedding's "<layer>/table<k>" is
// "<layer>.tables.<k>.weight".
func ExportName(param string) string {
	layer, p, ok := splitParam(param)
	switch {
	case !ok:
		return param
	case p == "w":
		return layer + ".weight"
	case p == "b":
		return layer + ".bias"
	case strings.HasPrefix(p, "table"):
		if _, err := strconv.Atoi(p[len("table"):]); err == nil {
			return layer + ".tables." + p[len("table"):] + ".weight"
		}
	}
	return layer + "." + p
}

// splitParam splits a parameter's name into its layer's name and its
// own, at the last "/" (a layer's name may hold one).
func splitParam(param string) (layer, p string, ok bool) {
	i := strings.LastIndex(param, "/")
	if i < 0 {
		return param, "", false
	}
	return param[:i], param[i+1:], true
}

// exported is a parameter tensor as it is exported: its name, its shape
// in PyTorch's layout, and whether the buffer's (rows, cols) matrix is
// transposed to get there.
type exported struct {
	name       string
	shape      []int
	rows, cols int // the buffer's shape, when transposed
	transpose  bool
	info       ParamInfo
}

// exportLayout maps a model's parameters to PyTorch's layout: a dense
// weight, (in, out) in the buffer, is nn.Linear's (out, in); a convolution
// weight, (channels*k*k, out) with rows ordered (channel, kernel row,
// kernel column), is nn.Conv2d's (out, channels, k, k). Biases, norm
// scales and shifts (GroupNorm: per channel; LayerNorm: per feature of the
// flattened input) and embedding tables (vocabulary, dimension) keep their
// shapes. A transformer's block weights keep GPT-2's Conv1D layout (in,
// out); its classification head "score" and untied "lm_head" are
// nn.Linear's (out, in).
func exportLayout(a Architecture, layout []ParamInfo) []exported {
	kinds := map[string]LayerSpec{}
	var walk func([]LayerSpec)
	walk = func(ls []LayerSpec) {
		for _, l := range ls {
			if l.Name != "" {
				kinds[l.Name] = l
			}
			walk(l.Body)
			walk(l.Shortcut)
		}
	}
	walk(a.Layers)
	transformer := len(a.Layers) == 1 && a.Layers[0].Kind == TransformerLayer
	out := make([]exported, len(layout))
	for i, p := range layout {
		e := exported{name: ExportName(p.Name), shape: slices.Clone(p.Shape), info: p}
		layer, suffix, _ := splitParam(p.Name)
		if transformer && suffix == "w" && (layer == "score" || layer == "lm_head") {
			// nn.Linear's (out, in); the blocks' weights keep GPT-2's
			// Conv1D layout (in, out).
			e.transpose, e.rows, e.cols = true, p.Shape[0], p.Shape[1]
			e.shape = []int{p.Shape[1], p.Shape[0]}
		}
		if l, ok := kinds[layer]; ok && suffix == "w" && len(p.Shape) == 2 {
			switch l.Kind {
			case DenseLayer:
				e.transpose, e.rows, e.cols = true, p.Shape[0], p.Shape[1]
				e.shape = []int{p.Shape[1], p.Shape[0]}
			case Conv2DLayer:
				if k := l.Kernel; k > 0 && p.Shape[0]%(k*k) == 0 {
					e.transpose, e.rows, e.cols = true, p.Shape[0], p.Shape[1]
					e.shape = []int{p.Shape[1], p.Shape[0] / (k * k), k, k}
				}
			}
		}
		out[i] = e
	}
	return out
}

// WriteSafetensors writes m's parameters as a safetensors file in
// PyTorch's names and layout (ExportName, exportLayout), stored as dtype
// (F32 keeps every bit; F16 and BF16 round to nearest), with metadata
// recording the architecture and meta so that ReadSafetensors rebuilds
// the model file.
func WriteSafetensors(w io.Writer, m Model, meta Metadata, dtype safetensors.DType) error {
	if m == nil {
		return dpcore.Invalid("models", "export: nil model")
	}
	ar, ok := m.(Architected)
	if !ok {
		return dpcore.Invalid("models", "export: model %s (%T) cannot describe its architecture", m.Name(), m)
	}
	a := ar.Architecture()
	archJSON, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("models: export: %w", err)
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("models: export: %w", err)
	}
	params := m.Params()
	var ts []safetensors.Tensor
	for _, e := range exportLayout(a, m.Layout()) {
		src := params[e.info.Offset : e.info.Offset+e.info.Len]
		data := slices.Clone(src)
		if e.transpose {
			for r := range e.rows {
				for c := range e.cols {
					data[c*e.rows+r] = src[r*e.cols+c]
				}
			}
		}
		ts = append(ts, safetensors.Tensor{Name: e.name, Shape: e.shape, DType: dtype, Data: data})
	}
	md := map[string]string{"format": "pt", SafetensorsArchKey: string(archJSON), SafetensorsMetaKey: string(metaJSON)}
	if err := safetensors.Write(w, ts, md); err != nil {
		return fmt.Errorf("models: export: %w", err)
	}
	return nil
}

// ReadSafetensors rebuilds a model from a safetensors file written by
// WriteSafetensors (or by another program in the same names, layout and
// metadata): the architecture comes from the metadata, and every
// parameter tensor must be in the file with its exported shape, as F32,
// F16, BF16 or F64, finite; a tensor the model lacks is refused too.
// Errors are one line; a file that is not valid safetensors wraps
// safetensors.ErrFormat, one that does not fit wraps dpcore.ErrInvalid.
func ReadSafetensors(r io.ReaderAt, size int64) (*Trained, error) {
	f, err := safetensors.Open(r, size)
	if err != nil {
		return nil, fmt.Errorf("models: import: %w", err)
	}
	archJSON, ok := f.Metadata[SafetensorsArchKey]
	if !ok {
		return nil, dpcore.Invalid("models", "import: the file's metadata has no %q (this build imports files written by train export)", SafetensorsArchKey)
	}
	var a Architecture
	if err := json.Unmarshal([]byte(archJSON), &a); err != nil {
		return nil, dpcore.Invalid("models", "import: metadata %q: %s", SafetensorsArchKey, strings.TrimPrefix(err.Error(), "json: "))
	}
	var meta Metadata
	if s, ok := f.Metadata[SafetensorsMetaKey]; ok {
		if err := json.Unmarshal([]byte(s), &meta); err != nil {
			return nil, dpcore.Invalid("models", "import: metadata %q: %s", SafetensorsMetaKey, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	// The model can have no more parameters than the file holds bytes at
	// 2 per parameter (F16), so the architecture cannot ask for more.
	limit := min(int64(maxFileParams), size/2)
	if a.Params == nil {
		return nil, dpcore.Invalid("models", "import: metadata %q lists no parameters", SafetensorsArchKey)
	}
	mm, err := a.build(0, true, int(limit))
	if err != nil {
		return nil, dpcore.Invalid("models", "import: architecture: %s", dpcore.Within("models", err))
	}
	m := mm.(*seq)
	layout := exportLayout(a, m.layout)
	want := map[string]bool{}
	for _, e := range layout {
		want[e.name] = true
	}
	for _, t := range f.Tensors {
		if !want[t.Name] {
			return nil, dpcore.Invalid("models", "import: tensor %q is not a parameter of %s", t.Name, a.Name)
		}
	}
	for _, e := range layout {
		t, ok := f.Lookup(e.name)
		if !ok {
			return nil, dpcore.Invalid("models", "import: %s needs tensor %q %v, which the file lacks", a.Name, e.name, e.shape)
		}
		if !slices.Equal(t.Shape, e.shape) {
			return nil, dpcore.Invalid("models", "import: tensor %q has shape %v, %s needs %v", e.name, t.Shape, a.Name, e.shape)
		}
		v, err := tensorValues(f, t)
		if err != nil {
			return nil, fmt.Errorf("models: import: %w", err)
		}
		dst := m.params[e.info.Offset : e.info.Offset+e.info.Len]
		if e.transpose {
			for r := range e.rows {
				for c := range e.cols {
					dst[r*e.cols+c] = v[c*e.rows+r]
				}
			}
		} else {
			copy(dst, v)
		}
	}
	return &Trained{Model: m, Architecture: m.Architecture(), Metadata: meta}, nil
}

// ReadSafetensorsFile is ReadSafetensors of the file at path.
func ReadSafetensorsFile(path string) (*Trained, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	t, err := ReadSafetensors(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}
