package models

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/nn"
	"github.com/dpmf-go/dpmf/safetensors"
)

// GPT2Config is the part of a Hugging Face GPT-2 config.json this build
// reads (model_type "gpt2"; other model types are refused).
type GPT2Config struct {
	ModelType         string   `json:"model_type"`
	VocabSize         int      `json:"vocab_size"`
	NPositions        int      `json:"n_positions"`
	NEmbd             int      `json:"n_embd"`
	NLayer            int      `json:"n_layer"`
	NHead             int      `json:"n_head"`
	NInner            *int     `json:"n_inner"`
	Activation        string   `json:"activation_function"`
	LayerNormEpsilon  float64  `json:"layer_norm_epsilon"`
	TieWordEmbeddings *bool    `json:"tie_word_embeddings,omitempty"`
	ScaleByLayerIdx   bool     `json:"scale_attn_by_inverse_layer_idx,omitempty"`
	ReorderAndUpcast  bool     `json:"reorder_and_upcast_attn,omitempty"`
	ScaleAttnWeights  *bool    `json:"scale_attn_weights,omitempty"`
	Architectures     []string `json:"architectures,omitempty"`
}

// GPT2Options adapt an imported GPT-2 for private fine-tuning.
type GPT2Options struct {
	// Context shortens the model's context (0: n_positions); only the
	// first Context position embeddings are kept.
	Context int
	// LoRARank, LoRAAlpha and LoRATargets add adapters
	// (TransformerConfig); FreezeBase trains only them (and a head).
	LoRARank    int
	LoRAAlpha   float64
	LoRATargets []string
	FreezeBase  bool
	// Classes > 0 replaces the language-model head by a freshly
	// initialized classification head (seed Seed).
	Classes int
	Seed    uint64
}

const maxConfigBytes = 1 << 20

// ReadGPT2Dir reads a Hugging Face GPT-2 directory (config.json and
// model.safetensors, as save_pretrained writes them: tensor names with or
// without the "transformer." prefix, Conv1D weights in x out, F32, F16 or
// BF16) into a model. Every tensor is checked against the config: names,
// shapes, dtypes, finite values; the attention-mask buffers ("attn.bias",
// "attn.masked_bias") and a tied "lm_head.weight" are skipped, any other
// tensor is refused. Errors are one line and wrap dpcore.ErrInvalid (or
// safetensors.ErrFormat for a file that is not safetensors).
func ReadGPT2Dir(dir string, opt GPT2Options) (*Trained, error) {
	raw, err := readLimited(filepath.Join(dir, "config.json"), maxConfigBytes)
	if err != nil {
		return nil, err
	}
	var hc GPT2Config
	if err := json.Unmarshal(raw, &hc); err != nil {
		return nil, dpcore.Invalid("models", "gpt2: config.json: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	c, err := hc.transformer(opt)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "model.safetensors")
	fh, err := os.Open(path)
	if err != nil {
		return nil, dpcore.Invalid("models", "gpt2: %v", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("models: gpt2: %w", err)
	}
	f, err := safetensors.Open(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("models: gpt2: %s: %w", path, err)
	}
	// Every block's 12 tensors must be in the file (whose header Open
	// bounded), before the layout of that many blocks is made.
	if need := 12*c.Blocks + 4; len(f.Tensors) < need {
		return nil, dpcore.Invalid("models", "gpt2: config.json has %d layers, which need %d tensors; %s holds %d", c.Blocks, need, path, len(f.Tensors))
	}
	// The file holds at least 2 bytes per pretrained parameter, so the
	// config cannot make the model larger than the file.
	b := NewBuilder("gpt2", [3]int{c.Context, 1, 1}, opt.Seed)
	b.root.limit = maxFileParams
	b.Transformer(c)
	if b.root.err != nil {
		return nil, dpcore.Invalid("models", "gpt2: config.json: %s", dpcore.Within("models", b.root.err))
	}
	if fresh := float64(opt.Classes*(c.Dim+1)) + float64(loraParams(c)); 2*(b.root.total-fresh) > float64(st.Size()) {
		return nil, dpcore.Invalid("models", "gpt2: config.json describes %.0f parameters, more than %s (%d bytes) can hold", b.root.total-fresh, path, st.Size())
	}
	mm, err := b.Model()
	if err != nil {
		return nil, dpcore.Invalid("models", "gpt2: config.json: %s", dpcore.Within("models", err))
	}
	m := mm.(*seq)
	tensors, err := gpt2Tensors(f, hc)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	for _, p := range m.layout {
		hf := ExportName(p.Name)
		if strings.HasPrefix(p.Name, "score/") || strings.Contains(p.Name, "/lora_") {
			continue // new: initialized by the builder
		}
		t, ok := tensors[hf]
		if !ok {
			return nil, dpcore.Invalid("models", "gpt2: %s lacks tensor %q %v", path, hf, p.Shape)
		}
		want := slices.Clone(p.Shape)
		if hf == "wpe.weight" {
			want[0] = hc.NPositions
		}
		if !slices.Equal(t.Shape, want) {
			return nil, dpcore.Invalid("models", "gpt2: %s: tensor %q has shape %v, the config needs %v", path, t.Name, t.Shape, want)
		}
		v, err := tensorValues(f, t)
		if err != nil {
			return nil, fmt.Errorf("models: gpt2: %w (file %s)", err, path)
		}
		copy(m.params[p.Offset:p.Offset+p.Len], v)
	}
	return &Trained{Model: m, Architecture: m.Architecture(), Metadata: Metadata{Dataset: "pretrained:" + filepath.Base(dir), Classes: m.classes}}, nil
}

func loraParams(c TransformerConfig) int64 {
	if c.LoRARank == 0 {
		return 0
	}
	return int64(c.Blocks) * int64(c.LoRARank) * int64(8*c.Dim+2*c.hidden())
}

// transformer checks the config and turns it into a TransformerConfig.
func (hc GPT2Config) transformer(opt GPT2Options) (TransformerConfig, error) {
	bad := func(format string, args ...any) (TransformerConfig, error) {
		return TransformerConfig{}, dpcore.Invalid("models", "gpt2: config.json: "+format, args...)
	}
	if hc.ModelType != "gpt2" {
		return bad("model_type %q: this build imports gpt2 only", hc.ModelType)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"vocab_size", hc.VocabSize}, {"n_positions", hc.NPositions}, {"n_embd", hc.NEmbd}, {"n_layer", hc.NLayer}, {"n_head", hc.NHead}} {
		if f.v <= 0 || f.v > maxSpecInt {
			return bad("%s %d (missing or out of range)", f.name, f.v)
		}
	}
	c := TransformerConfig{Vocab: hc.VocabSize, Context: hc.NPositions, Dim: hc.NEmbd, Heads: hc.NHead, Blocks: hc.NLayer,
		Causal: true, Eps: hc.LayerNormEpsilon, LoRARank: opt.LoRARank, LoRAAlpha: opt.LoRAAlpha,
		LoRATargets: opt.LoRATargets, FreezeBase: opt.FreezeBase, Classes: opt.Classes}
	if hc.NInner != nil {
		if *hc.NInner <= 0 || *hc.NInner > maxSpecInt {
			return bad("n_inner %d", *hc.NInner)
		}
		c.Hidden = *hc.NInner
	}
	switch hc.Activation {
	case "gelu_new", "gelu_pytorch_tanh", "":
	case "gelu":
		c.ExactGELU = true
	default:
		return bad("activation_function %q (want gelu_new, gelu_pytorch_tanh or gelu)", hc.Activation)
	}
	if !(hc.LayerNormEpsilon >= 0 && hc.LayerNormEpsilon < 1) {
		return bad("layer_norm_epsilon %v", hc.LayerNormEpsilon)
	}
	if hc.LayerNormEpsilon == 0 {
		c.Eps = 1e-5
	}
	if hc.TieWordEmbeddings != nil && !*hc.TieWordEmbeddings {
		return bad("tie_word_embeddings false: this build imports GPT-2 with its output tied to wte")
	}
	if hc.ScaleByLayerIdx || hc.ReorderAndUpcast || hc.ScaleAttnWeights != nil && !*hc.ScaleAttnWeights {
		return bad("scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn or scale_attn_weights false are not supported")
	}
	if opt.Context < 0 || opt.Context > hc.NPositions {
		return bad("context %d outside [1, n_positions %d]", opt.Context, hc.NPositions)
	}
	if opt.Context > 0 {
		c.Context = opt.Context
	}
	if err := c.check(); err != nil {
		return bad("%s", dpcore.Within("models", err))
	}
	return c, nil
}

// gpt2Tensors maps the file's tensors by their GPT-2 name (without the
// "transformer." prefix), refusing names GPT-2 does not have.
func gpt2Tensors(f *safetensors.File, hc GPT2Config) (map[string]safetensors.Info, error) {
	out := map[string]safetensors.Info{}
	for _, t := range f.Tensors {
		name := strings.TrimPrefix(t.Name, "transformer.")
		switch {
		case strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias"):
			continue // the causal-mask buffers of older checkpoints
		case name == "lm_head.weight":
			if !slices.Equal(t.Shape, []int{hc.VocabSize, hc.NEmbd}) {
				return nil, dpcore.Invalid("models", "gpt2: tensor %q has shape %v, the config needs %v", t.Name, t.Shape, []int{hc.VocabSize, hc.NEmbd})
			}
			continue // tied to wte
		}
		if !gpt2Name(name, hc.NLayer) {
			return nil, dpcore.Invalid("models", "gpt2: tensor %q is not a GPT-2 parameter of this config", t.Name)
		}
		if _, dup := out[name]; dup {
			return nil, dpcore.Invalid("models", "gpt2: tensor %q appears twice (with and without the transformer. prefix)", name)
		}
		out[name] = t
	}
	return out, nil
}

func gpt2Name(name string, layers int) bool {
	switch name {
	case "wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias":
		return true
	}
	var i int
	var rest string
	if n, _ := fmt.Sscanf(name, "h.%d.%s", &i, &rest); n != 2 || i < 0 || i >= layers || name != fmt.Sprintf("h.%d.%s", i, rest) {
		return false
	}
	for _, s := range []string{"ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"} {
		if rest == s+".weight" || rest == s+".bias" {
			return true
		}
	}
	return false
}

// tensorValues reads a floating tensor and checks that it is finite.
func tensorValues(f *safetensors.File, t safetensors.Info) ([]float32, error) {
	if t.DType != safetensors.F32 && t.DType != safetensors.F16 && t.DType != safetensors.BF16 && t.DType != safetensors.F64 {
		return nil, dpcore.Invalidf("tensor %q is %v, want a floating type (F32, F16, BF16, F64)", t.Name, t.DType)
	}
	v, err := f.Float32s(t)
	if err != nil {
		return nil, err
	}
	for j, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, dpcore.Invalidf("tensor %q: element %d is %v", t.Name, j, x)
		}
	}
	return v, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, dpcore.Invalid("models", "gpt2: %v", err)
	}
	defer fh.Close()
	raw, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, fmt.Errorf("models: gpt2: %w", err)
	}
	if int64(len(raw)) > limit {
		return nil, dpcore.Invalid("models", "gpt2: %s is larger than %d bytes", path, limit)
	}
	return raw, nil
}

// WriteGPT2Dir writes m as a Hugging Face GPT-2 directory: config.json
// and model.safetensors in GPT-2's names and Conv1D layout (adapters
// merged into their weights, MergeLoRA), as dtype, so that ReadGPT2Dir,
// PyTorch or Hugging Face's GPT2LMHeadModel load it. Only GPT-2-shaped
// language models can be written so: causal, pre-norm, learned
// positions, tied output.
func WriteGPT2Dir(dir string, m Model, dtype safetensors.DType) error {
	_, c, ok := TransformerOf(m)
	if !ok {
		return dpcore.Invalid("models", "gpt2 export: %s is not a transformer", m.Name())
	}
	if !c.Causal || c.PostNorm || c.Positions != nn.LearnedPositions || c.Untied || c.Classes > 0 {
		return dpcore.Invalid("models", "gpt2 export: %s is not GPT-2-shaped (causal %v, post-norm %v, %v positions, untied %v, classes %d)",
			m.Name(), c.Causal, c.PostNorm, c.Positions, c.Untied, c.Classes)
	}
	mm, err := MergeLoRA(m)
	if err != nil {
		return err
	}
	act := "gelu_new"
	if c.ExactGELU {
		act = "gelu"
	}
	eps := c.Eps
	if eps == 0 {
		eps = 1e-5
	}
	inner := c.hidden()
	cfg := map[string]any{
		"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"vocab_size": c.Vocab, "n_positions": c.Context, "n_ctx": c.Context, "n_embd": c.Dim, "n_layer": c.Blocks,
		"n_head": c.Heads, "n_inner": inner, "activation_function": act, "layer_norm_epsilon": eps,
		"tie_word_embeddings": true, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("models: gpt2 export: %w", err)
	}
	params := mm.Params()
	var ts []safetensors.Tensor
	for _, p := range mm.Layout() {
		ts = append(ts, safetensors.Tensor{Name: ExportName(p.Name), Shape: slices.Clone(p.Shape), DType: dtype, Data: params[p.Offset : p.Offset+p.Len]})
	}
	var b bytes.Buffer
	if err := safetensors.Write(&b, ts, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("models: gpt2 export: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("models: gpt2 export: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "model.safetensors"), b.Bytes()); err != nil {
		return fmt.Errorf("models: gpt2 export: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(cj, '\n')); err != nil {
		return fmt.Errorf("models: gpt2 export: %w", err)
	}
	return nil
}
