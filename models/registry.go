package models

import (
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// The model registry: the models a run builds by name (train's -model
// flag). Names are parsed here and nowhere else.

// Named is a model named as on the command line, with the settings of
// the named architectures.
type Named struct {
	// Name is one of Names().
	Name string
	// Hidden are the hidden layer widths of "mlp" (default 128) and
	// "tabular" (default 64).
	Hidden []int
	// Categorical are the vocabulary sizes of "tabular"'s categorical
	// columns, the last len(Categorical) features of the input.
	Categorical []int
	// EmbeddingDim is "tabular"'s embedding dimension (0:
	// DefaultEmbeddingDim).
	EmbeddingDim int
	// Groups is the number of GroupNorm groups of "scatternet" (0:
	// ScatterNetGroups) and "wrn16-4" (0: 16); it must divide the
	// normalized channels.
	Groups int
}

const (
	// DefaultEmbeddingDim is the embedding dimension of "tabular".
	DefaultEmbeddingDim = 8
	// ScatterNetGroups is the GroupNorm groups of "scatternet".
	ScatterNetGroups = 27
	// wrnGroups is the GroupNorm groups of "wrn16-4".
	wrnGroups = 16
)

// architectures is the registry: one entry per name, in the order the
// usage gives them. build makes the model; params, for the dense models,
// counts its parameters for an input of in features (nil: fixed size).
var architectures = []struct {
	name   string
	build  func(n Named, input [3]int, classes int, seed uint64) (Model, error)
	params func(n Named, in, classes float64) float64
}{
	{"logistic", func(_ Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewLogistic(input, classes, seed)
	}, func(_ Named, in, classes float64) float64 { return denseParams(in, nil, classes) }},
	{"mlp", func(n Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewMLP(input, n.hidden(), classes, nn.Tanh, seed)
	}, func(n Named, in, classes float64) float64 { return denseParams(in, n.hidden(), classes) }},
	{"cnn", func(_ Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewCIFARCNN(input, classes, seed)
	}, nil},
	{"cnn-small", func(_ Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewSmallCNN(input, classes, seed)
	}, nil},
	{"wrn16-4", func(n Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewWRN16x4(input, classes, n.groups(wrnGroups), seed)
	}, nil},
	{"tabular", buildTabular, tabularParams},
	{"scatternet", func(n Named, input [3]int, classes int, seed uint64) (Model, error) {
		return NewScatterNet(input, classes, n.groups(ScatterNetGroups), seed)
	}, nil},
}

// Names lists the model names Named knows, in the order the usage gives
// them.
func Names() []string {
	names := make([]string, len(architectures))
	for i, a := range architectures {
		names[i] = a.name
	}
	return names
}

// hidden is n.Hidden or the default of n's architecture.
func (n Named) hidden() []int {
	switch {
	case len(n.Hidden) > 0:
		return n.Hidden
	case n.Name == "tabular":
		return []int{64}
	}
	return []int{128}
}

// groups is n.Groups, or def when it is 0.
func (n Named) groups(def int) int {
	if n.Groups == 0 {
		return def
	}
	return n.Groups
}

// GroupNormed reports whether the named architecture has GroupNorm layers
// whose groups Named.Groups sets.
func GroupNormed(name string) bool { return name == "scatternet" || name == "wrn16-4" }

func (n Named) embeddingDim() int {
	if n.EmbeddingDim == 0 {
		return DefaultEmbeddingDim
	}
	return n.EmbeddingDim
}

// Build builds the named model for inputs of the given shape (for
// "scatternet", the shape of the scattering features) and classes,
// initialized from seed.
func (n Named) Build(input [3]int, classes int, seed uint64) (Model, error) {
	for _, a := range architectures {
		if a.name == n.Name {
			return a.build(n, input, classes, seed)
		}
	}
	return nil, CheckName(n.Name)
}

// Known reports whether name is one of Names().
func Known(name string) bool { return slices.Contains(Names(), name) }

// CheckName returns nil for a name in Names(), else the error Build gives
// for it, which lists the names.
func CheckName(name string) error {
	if Known(name) {
		return nil
	}
	names := Names()
	return dpcore.Invalid("models", "model %q: want %s or %s", name, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// EstimateParams is the parameter count of the dense named models (mlp,
// logistic, tabular) on inputs of inputSize features, computed in float64
// so that absurd hidden sizes cannot overflow; the other models have
// fixed sizes and count 0 here.
func (n Named) EstimateParams(inputSize, classes int) float64 {
	for _, a := range architectures {
		if a.name == n.Name && a.params != nil {
			return a.params(n, float64(inputSize), float64(classes))
		}
	}
	return 0
}

// buildTabular is "tabular": the last len(n.Categorical) input features
// are categorical ids, embedded.
func buildTabular(n Named, input [3]int, classes int, seed uint64) (Model, error) {
	if len(n.Categorical) == 0 || len(n.Categorical) > input[0] {
		return nil, dpcore.Invalid("models", "model tabular: %d categorical columns of %d features (want at least one)", len(n.Categorical), input[0])
	}
	return NewTabular(input[0]-len(n.Categorical), n.Categorical, n.embeddingDim(), n.hidden(), classes, seed)
}

// tabularParams counts "tabular"'s parameters: each categorical column is
// replaced by its embedding, and the tables count too.
func tabularParams(n Named, in, classes float64) float64 {
	dim := float64(n.embeddingDim())
	emb := 0.0
	for _, v := range n.Categorical {
		emb += float64(v) * dim
	}
	in += float64(len(n.Categorical)) * (dim - 1)
	return emb + denseParams(in, n.hidden(), classes)
}

func denseParams(in float64, hidden []int, classes float64) float64 {
	d := 0.0
	for _, h := range hidden {
		d += (in + 1) * float64(h)
		in = float64(h)
	}
	return d + (in+1)*classes
}
