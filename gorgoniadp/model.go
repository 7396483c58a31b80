// Package gorgoniadp trains a user's own gorgonia model with differential
// privacy: the user builds the forward graph of one example with ordinary
// gorgonia ops (gorgonia.Mul, Conv2d, MaxPool2D, Tanh, Rectify, ...), hands
// over its input, logits and parameter nodes, and gets a Model that
// train.Run trains through train.Config's Model.Backend, or an Engine for a
// training loop of the user's own.
//
// A graph made of dense layers, convolutions, Tanh, Rectify, MaxPool2D,
// flattening reshapes and the log-softmax cross-entropy is compiled to
// the built-in layers of package nn and runs on package clip's batched
// executor over the same parameter buffer (compile.go; Model.Compiled).
// Any other graph runs one example at a time:
//
// Per-example gradients are exact: each example of a batch runs forward
// and backward through the user's graph alone (gorgonia's own reverse-mode
// differentiation on a graph of batch one), so no op can mix examples. Its
// gradient enters the sum through package clip's clipping rule
// (clip.Accumulator.Add: the L2 norm over all parameters in float64 from
// the float32 values, the clip factor with its margin, entries scaled so
// that no float32 rounding can lift a clipped contribution above zeta);
// an example whose loss or gradient is not finite adds exactly zero and is
// counted in Stats.NonFinite, and nothing about one example's data stops
// the sum (docs/math.md, no data-dependent control flow). Only ops whose per-example
// gradients are tested against an independent reference are accepted (see
// Supported); New refuses any other op, and ops that mix the examples of a
// batch (gorgonia.BatchNorm) or draw random numbers (gorgonia.Dropout
// outside a graph that compiles to the built-in layers, whose dropout
// masks are keyed per example), with a one-line error naming the op.
//
// The parameters stay the user's gorgonia nodes: New rebinds each one to a
// *tensor.Dense viewing one flat float32 buffer (Params), which the
// optimizer of package train updates in place, so the graph, and anything
// that reads the nodes' values, sees every step.
package gorgoniadp

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/train"
	"github.com/vmihailenco/msgpack/v5"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Graph is a user's gorgonia model of one example.
type Graph struct {
	// Input is the input node of one example, float32, shape (1, C, H, W)
	// or (1, D): every node of the graph sees one example only.
	Input *gorgonia.Node
	// Logits are the class scores of the example, shape (1, K) or (K).
	Logits *gorgonia.Node
	// Loss and Label are optional. Without them New adds the
	// cross-entropy -sum(onehot(y) * LogSoftMax(Logits)) and its label
	// node to the graph. With them, Loss is the scalar float32 loss of the
	// example and Label an input node shaped like Logits, which receives
	// the one-hot label.
	Loss, Label *gorgonia.Node
	// Params are the trained parameter nodes: float32 input nodes with
	// values (gorgonia.WithValue or WithInit), in the order of the flat
	// parameter vector. Other input nodes the loss reads are constants.
	Params []*gorgonia.Node
	// Shape is the (channels, height, width) of an example in the data
	// set; zero means Input's (C, H, W). It must hold as many values as
	// Input.
	Shape [3]int
}

// Model is a user's gorgonia graph prepared for private training. It
// implements train.Backend. It is not safe for concurrent use.
type Model struct {
	name    string
	g       Graph
	shape   [3]int
	classes int
	names   []string
	shapes  [][]int
	offsets []int
	flat    []float32
	views   []*tensor.Dense
	grads   gorgonia.Nodes
	x, y    []float32 // backings of the input and label tensors
	train   gorgonia.VM
	eval    gorgonia.VM
	gbuf    []float32 // the last example's gradient

	// pools are the graph's max-pooling nodes and guard the forward
	// pass up to them (nil without max pooling): see poolsOK.
	pools gorgonia.Nodes
	guard gorgonia.VM
	// drops are the graph's Dropout ops, switched off while logits runs
	// the graph forward (the compiled layers do the dropping).
	drops  []interface{ SetTraining(bool) error }
	fast   *compiled // the graph as built-in layers (compile.go), or nil
	why    string    // why fast is nil
	arch   []string  // the architecture's description (digest.go)
	digest string    // its SHA-256
}

// New prepares g for private training under the name name: it checks
// every op the loss depends on (see Supported), adds the cross-entropy
// when g has no Loss, adds the gradient nodes (gorgonia.Grad), rebinds the
// parameter nodes to views of one flat buffer, and compiles the graph.
// The graph must not be changed afterwards, nor given to New again (also
// after an error, which may leave it changed).
func New(name string, g Graph) (*Model, error) {
	m, err := newModel(name, g)
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: %w", err)
	}
	return m, nil
}

func newModel(name string, g Graph) (*Model, error) {
	if g.Input == nil || g.Logits == nil || len(g.Params) == 0 {
		return nil, dpcore.Invalidf("a graph needs its Input, Logits and Params nodes")
	}
	if (g.Loss == nil) != (g.Label == nil) {
		return nil, dpcore.Invalidf("give both Loss and Label, or neither (then the cross-entropy of Logits is added)")
	}
	m := &Model{name: name, g: g, shape: g.Shape}
	if given(g.Input.Graph()) {
		return nil, dpcore.Invalidf("the graph was given to New already (New adds its loss and gradient nodes to it): build a fresh graph for each model")
	}
	if err := m.checkInputOutput(); err != nil {
		return nil, err
	}
	seen, err := checkParams(g)
	if err != nil {
		return nil, err
	}
	if err := m.checkLoss(seen); err != nil {
		return nil, err
	}
	m.arch = m.architecture()
	m.digest = digestOf(m.arch)
	if err := m.bind(); err != nil {
		return nil, err
	}
	if m.grads, err = grad(m.g.Loss, g.Params); err != nil {
		return nil, err
	}
	eg := g.Input.Graph()
	roots := append(gorgonia.Nodes{m.g.Loss, g.Logits}, m.grads...)
	m.train = gorgonia.NewTapeMachine(eg.SubgraphRoots(roots...))
	m.eval = gorgonia.NewTapeMachine(eg.SubgraphRoots(g.Logits))
	for _, n := range eg.SubgraphRoots(m.g.Loss).AllNodes() {
		if n.Op() != nil && opType(n.Op()) == "maxPoolOp" {
			m.pools = append(m.pools, n)
		}
	}
	if len(m.pools) > 0 {
		m.guard = gorgonia.NewTapeMachine(eg.SubgraphRoots(m.pools...))
	}
	if err := m.compile(g.Loss != nil); err != nil {
		return nil, err
	}
	return m, nil
}

// poolsOK runs example x forward up to the max-pooling nodes and reports
// whether every pooling window has a maximum. gorgonia's max pooling
// starts each window at -MaxFloat32 with no argmax and keeps it when no
// value is larger (a window of NaNs, or of -Inf: finite inputs near the
// float32 maximum overflow to both), and its backward pass then indexes
// out of range in a goroutine of its own, which kills the process: such
// an example must never reach the training graph.
func (m *Model) poolsOK(x []float32) (bool, error) {
	if m.guard == nil {
		return true, nil
	}
	copy(m.x, x)
	if err := run(m.guard); err != nil {
		return false, err
	}
	for _, n := range m.pools {
		v, err := float32s(n.Value())
		if err != nil {
			return false, fmt.Errorf("max pooling %s: %w", n.Name(), err)
		}
		for _, p := range v {
			if !(p > -math.MaxFloat32) {
				return false, nil
			}
		}
	}
	return true, nil

}

// given says whether New already differentiated a loss on eg (a node
// is some node's gradient).
func given(eg *gorgonia.ExprGraph) bool {
	for _, n := range eg.AllNodes() {
		if len(n.DerivOf()) > 0 {
			return true
		}
	}
	return false
}

// checkInputOutput checks the input node (one example, float32) and the
// logits, and sets the data shape (Graph.Shape, or the input's) and the
// classes.
func (m *Model) checkInputOutput() error {
	g := m.g
	in := g.Input.Shape()
	if g.Input.Dtype() != tensor.Float32 || len(in) < 2 || in[0] != 1 {
		return dpcore.Invalidf("input node %s: %v of shape %v: want float32 of shape (1, C, H, W) or (1, D), the graph of one example", g.Input.Name(), g.Input.Dtype(), in)
	}
	if g.Input.Op() != nil {
		return dpcore.Invalidf("input node %s is computed by %v: want an input node", g.Input.Name(), g.Input.Op())
	}
	if m.shape == ([3]int{}) {
		switch len(in) {
		case 4:
			m.shape = [3]int{in[1], in[2], in[3]}
		case 2:
			m.shape = [3]int{in[1], 1, 1}
		default:
			return dpcore.Invalidf("input node %s has shape %v: give Graph.Shape", g.Input.Name(), in)
		}
	}
	if s := m.shape; s[0]*s[1]*s[2] != in.TotalSize() || s[0] <= 0 || s[1] <= 0 || s[2] <= 0 {
		return dpcore.Invalidf("Graph.Shape %v holds %d values, input node %s of shape %v holds %d: set Graph.Shape to the (channels, height, width) of one example, or zero for the input node's", m.shape, s[0]*s[1]*s[2], g.Input.Name(), in, in.TotalSize())
	}
	ls := g.Logits.Shape()
	if g.Logits.Dtype() != tensor.Float32 || !(len(ls) == 1 || len(ls) == 2 && ls[0] == 1) || ls.TotalSize() < 2 {
		return dpcore.Invalidf("logits node %s: %v of shape %v: want float32 of shape (1, K) or (K), K >= 2 classes", g.Logits.Name(), g.Logits.Dtype(), ls)
	}
	m.classes = ls.TotalSize()
	if g.Logits.Graph() != g.Input.Graph() {
		return dpcore.Invalidf("logits node %s belongs to another graph than the input", g.Logits.Name())
	}
	return nil
}

// checkParams checks that the parameters are distinct float32 input nodes
// of the input's graph with values, and that the forward graph uses only
// supported ops; seen holds the input and the parameters.
func checkParams(g Graph) (seen map[*gorgonia.Node]bool, err error) {
	eg := g.Input.Graph()
	seen = map[*gorgonia.Node]bool{g.Input: true}
	for _, p := range g.Params {
		if p == nil || p.Graph() != eg {
			return nil, dpcore.Invalidf("parameter %v is nil or belongs to another graph", p)
		}
		if seen[p] {
			return nil, dpcore.Invalidf("parameter %s is listed twice, or is the input", p.Name())
		}
		seen[p] = true
		if p.Op() != nil || p.Dtype() != tensor.Float32 || p.IsScalar() {
			return nil, dpcore.Invalidf("parameter %s: want a float32 tensor input node (not a scalar, not computed), got %v %v", p.Name(), p.Dtype(), p.Shape())
		}
		d, ok := p.Value().(*tensor.Dense)
		if !ok || d == nil || d.Dtype() != tensor.Float32 {
			return nil, dpcore.Invalidf("parameter %s has no float32 value: create it with gorgonia.WithValue or gorgonia.WithInit", p.Name())
		}
	}
	// The user's forward graph (before anything is added) must use only
	// supported ops.
	if err := checkOps(eg.SubgraphRoots(g.Logits).AllNodes()); err != nil {
		return nil, err
	}
	return seen, nil
}

// checkLoss checks the user's loss and label nodes, or adds the
// cross-entropy of the logits, and requires a value of every other input
// node the loss reads (a constant).
func (m *Model) checkLoss(seen map[*gorgonia.Node]bool) error {
	g := m.g
	eg := g.Input.Graph()
	if g.Loss != nil {
		if g.Loss.Graph() != eg || g.Label.Graph() != eg {
			return dpcore.Invalidf("loss node %s or label node %s belongs to another graph than the input", g.Loss.Name(), g.Label.Name())
		}
		if err := checkOps(eg.SubgraphRoots(g.Loss).AllNodes()); err != nil {
			return err
		}
		if !g.Loss.IsScalar() || g.Loss.Dtype() != tensor.Float32 {
			return dpcore.Invalidf("loss node %s: want a float32 scalar, got %v %v", g.Loss.Name(), g.Loss.Dtype(), g.Loss.Shape())
		}
		if g.Label.Op() != nil || g.Label.Dtype() != tensor.Float32 || g.Label.Shape().TotalSize() != m.classes {
			return dpcore.Invalidf("label node %s: want a float32 input node of %d values (one-hot), got %v %v", g.Label.Name(), m.classes, g.Label.Dtype(), g.Label.Shape())
		}
	} else {
		var err error
		if m.g.Label, m.g.Loss, err = crossEntropy(g.Logits); err != nil {
			return err
		}
	}
	for _, n := range eg.SubgraphRoots(m.g.Loss).AllNodes() {
		if n.Op() == nil && !seen[n] && n != m.g.Label && n.Value() == nil {
			return dpcore.Invalidf("input node %s has no value: list it in Params to train it, or give it a value", n.Name())
		}
	}
	return nil
}

// bind gives the input, the label and the parameters buffers of their
// own that the nodes view: the parameters one flat buffer, copied from
// their initial values.
func (m *Model) bind() error {
	g := m.g
	in := g.Input.Shape()
	m.x = make([]float32, in.TotalSize())
	if err := gorgonia.Let(g.Input, tensor.New(tensor.WithShape(in...), tensor.WithBacking(m.x))); err != nil {
		return fmt.Errorf("binding the input: %w", err)
	}
	m.y = make([]float32, m.classes)
	if err := gorgonia.Let(m.g.Label, tensor.New(tensor.WithShape(m.g.Label.Shape()...), tensor.WithBacking(m.y))); err != nil {
		return fmt.Errorf("binding the label: %w", err)
	}
	total := 0
	for _, p := range g.Params {
		m.offsets = append(m.offsets, total)
		total += p.Shape().TotalSize()
	}
	m.flat = make([]float32, total)
	m.gbuf = make([]float32, total)
	for i, p := range g.Params {
		off, n := m.offsets[i], p.Shape().TotalSize()
		copy(m.flat[off:off+n], p.Value().(*tensor.Dense).Data().([]float32))
		v := tensor.New(tensor.WithShape(p.Shape()...), tensor.WithBacking(m.flat[off:off+n:off+n]))
		if err := gorgonia.Let(p, v); err != nil {
			return fmt.Errorf("binding parameter %s: %w", p.Name(), err)
		}
		m.views = append(m.views, v)
		m.names = append(m.names, p.Name())
		m.shapes = append(m.shapes, []int(p.Shape().Clone()))
	}
	return nil
}

// grad is gorgonia.Grad, with gorgonia's panics (ops without a
// derivative) turned into errors.
func grad(loss *gorgonia.Node, params []*gorgonia.Node) (grads gorgonia.Nodes, err error) {
	defer func() {
		if r := recover(); r != nil {
			grads, err = nil, dpcore.Invalidf("differentiating the loss: gorgonia failed: %v", oneLine(fmt.Sprint(r)))
		}
	}()
	if grads, err = gorgonia.Grad(loss, params...); err != nil {
		return nil, dpcore.Invalidf("differentiating the loss: %v", oneLine(err.Error()))
	}
	return grads, nil
}

// crossEntropy adds -sum(label * LogSoftMax(logits)) and its label node.
func crossEntropy(logits *gorgonia.Node) (label, loss *gorgonia.Node, err error) {
	eg := logits.Graph()
	label = gorgonia.NewTensor(eg, tensor.Float32, logits.Dims(), gorgonia.WithShape(logits.Shape()...), gorgonia.WithName("gorgoniadp.label"))
	lsm, err := gorgonia.LogSoftMax(logits)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-entropy: %w", err)
	}
	prod, err := gorgonia.HadamardProd(label, lsm)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-entropy: %w", err)
	}
	s, err := gorgonia.Sum(prod)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-entropy: %w", err)
	}
	if loss, err = gorgonia.Neg(s); err != nil {
		return nil, nil, fmt.Errorf("cross-entropy: %w", err)
	}
	return label, loss, nil
}

// Name is the name given to New.
func (m *Model) Name() string { return m.name }

// InputShape is the (channels, height, width) of one example.
func (m *Model) InputShape() [3]int { return m.shape }

// Classes is the number of classes (the size of the logits).
func (m *Model) Classes() int { return m.classes }

// NumParams is the number of trained parameters.
func (m *Model) NumParams() int { return len(m.flat) }

// Params is the flat parameter buffer itself, which the parameter nodes'
// tensors view (in the order of Graph.Params): writes change the model.
func (m *Model) Params() []float32 { return m.flat }

// Names are the parameter nodes' names, in the order of Params.
func (m *Model) Names() []string { return slices.Clone(m.names) }

// Tensors are the parameter nodes' values, views of Params.
func (m *Model) Tensors() []*tensor.Dense { return slices.Clone(m.views) }

// Views returns tensors shaped like the parameters over consecutive
// ranges of v (len NumParams), e.g. a gradient or noise vector, so one
// flat vector serves as the gradient tensors of every parameter.
func (m *Model) Views(v []float32) ([]*tensor.Dense, error) {
	if len(v) != len(m.flat) {
		return nil, dpcore.Invalid("gorgoniadp", "views: %d values for %d parameters", len(v), len(m.flat))
	}
	out := make([]*tensor.Dense, len(m.views))
	for i, s := range m.shapes {
		off := m.offsets[i]
		n := m.views[i].Size()
		out[i] = tensor.New(tensor.WithShape(s...), tensor.WithBacking(v[off:off+n:off+n]))
	}
	return out, nil
}

// ValueGrads pairs each parameter node with its range of grad (len
// NumParams) as gorgonia.ValueGrad, for gorgonia's solvers
// (gorgonia.NewVanillaSolver(...).Step), which update the parameters in
// place and zero grad.
func (m *Model) ValueGrads(grad []float32) ([]gorgonia.ValueGrad, error) {
	views, err := m.Views(grad)
	if err != nil {
		return nil, err
	}
	out := make([]gorgonia.ValueGrad, len(views))
	for i, v := range views {
		out[i] = valueGrad{m.g.Params[i], v}
	}
	return out, nil
}

type valueGrad struct {
	n *gorgonia.Node
	g *tensor.Dense
}

func (v valueGrad) Value() gorgonia.Value         { return v.n.Value() }
func (v valueGrad) Grad() (gorgonia.Value, error) { return v.g, nil }
func (v valueGrad) Name() string                  { return v.n.Name() }

// Engine returns the engine computing clipped gradient sums with the
// clipping opt describes (flat clipping at opt.Norm, opt.LInfZero, or
// NonPrivate; MaxBatch bounds a batch). Per-layer clipping is refused.
// The engine shares the model's compiled graph: use one at a time.
func (m *Model) Engine(opt clip.Options) (*Engine, error) {
	return newEngine(m, opt)
}

// NewEngine is Engine as a train.Engine, which makes Model a
// train.Backend.
func (m *Model) NewEngine(opt clip.Options) (train.Engine, error) {
	e, err := newEngine(m, opt)
	if err != nil {
		return nil, err
	}
	return e, nil
}

var _ train.Backend = (*Model)(nil)

// The file format: a checksummed envelope (package atomicfile) around the
// msgpack of params.
const (
	fileMagic   = "dpmf-gorgonia-params"
	fileVersion = 1
)

type paramsFile struct {
	Name   string    `msgpack:"name"`
	Names  []string  `msgpack:"names"`
	Shapes [][]int   `msgpack:"shapes"`
	Values []float32 `msgpack:"values"`
	// Arch and Digest describe the graph (Model.Digest); files written
	// before them have neither, and load without the check.
	Arch   []string `msgpack:"arch,omitempty"`
	Digest string   `msgpack:"digest,omitempty"`
}

// Save writes the parameters with their names and shapes in a checksummed
// envelope.
func (m *Model) Save(w io.Writer) error {
	b, err := m.sealed()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("gorgoniadp: save: %w", err)
	}
	return nil
}

func (m *Model) sealed() ([]byte, error) {
	payload, err := msgpack.Marshal(&paramsFile{Name: m.name, Names: m.names, Shapes: m.shapes, Values: m.flat, Arch: m.arch, Digest: m.digest})
	if err != nil {
		return nil, fmt.Errorf("gorgoniadp: save: %w", err)
	}
	return atomicfile.Seal(fileMagic, fileVersion, payload)
}

// SaveFile writes Save's bytes to path atomically: a crash leaves the old
// file or the new one.
func (m *Model) SaveFile(path string) error {
	b, err := m.sealed()
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b); err != nil {
		return fmt.Errorf("gorgoniadp: save: %w", err)
	}
	return nil
}

// Load reads parameters written by Save of a graph with the same
// parameter names and shapes into the parameter tensors.
func (m *Model) Load(r io.Reader) error {
	limit := int64(4*len(m.flat)) + 1<<20
	for _, n := range m.names {
		limit += int64(len(n)) + 64
	}
	for _, l := range m.arch {
		limit += 2*int64(len(l)) + 64 // another architecture may say more
	}
	payload, err := atomicfile.Unseal(r, fileMagic, fileVersion, limit)
	if err != nil {
		return dpcore.Invalid("gorgoniadp", "load: %s", atomicfile.Reason(err))
	}
	var f paramsFile
	if err := atomicfile.Unmarshal(payload, &f); err != nil {
		return dpcore.Invalid("gorgoniadp", "load: %s", atomicfile.Reason(err))
	}
	if !slices.Equal(f.Names, m.names) || len(f.Shapes) != len(m.shapes) || len(f.Values) != len(m.flat) {
		return dpcore.Invalid("gorgoniadp", "load: the file holds parameters %v (%d values), the graph %v (%d values)", f.Names, len(f.Values), m.names, len(m.flat))
	}
	for i, s := range f.Shapes {
		if !slices.Equal(s, m.shapes[i]) {
			return dpcore.Invalid("gorgoniadp", "load: parameter %s has shape %v in the file, %v in the graph", m.names[i], s, m.shapes[i])
		}
	}
	if f.Digest != "" && f.Digest != m.digest {
		return dpcore.Invalid("gorgoniadp", "load: the file holds model %q of another architecture than %q (graph digest %.12s, this graph %.12s): %s", f.Name, m.name, f.Digest, m.digest, archDifference(f.Arch, m.arch))
	}
	copy(m.flat, f.Values)
	return nil
}

// LoadFile reads a file written by SaveFile.
func (m *Model) LoadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("gorgoniadp: load: %w", err)
	}
	return m.Load(bytes.NewReader(b))
}
