package gorgoniadp

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"gorgonia.org/gorgonia"
)

// supportedOps are the gorgonia op types accepted in a user's graph, each
// tested against a brute-force per-example reference (TestPerExample).
// The types listed in named are accepted only with the listed
// descriptions (the op's String up to its first space).
var supportedOps = []string{
	"linAlgBinOp",    // Mul: dense layers, Conv2d's product (see named)
	"elemBinOp",      // see named
	"elemUnaryOp",    // see named
	"im2colOp",       // Im2Col, Conv2d
	"maxPoolOp",      // MaxPool2D
	"avgPoolOp",      // AveragePool2D
	"reshapeOp",      // Reshape
	"transposeOp",    // Transpose
	"repeatOp",       // BroadcastAdd and the other broadcasts
	"sizeOp",         // Mean's divisor
	"sumOp",          // Sum, Mean
	"softmaxOp",      // SoftMax, LogSoftMax
	"concatOp",       // Concat
	"sliceOp",        // Slice
	"constantScalar", // scalar constants
}

var named = map[string][]string{
	// Matrix times matrix, and times a transposed matrix (Conv2d).
	"linAlgBinOp": {"A × B", "A × Bᵀ"},
	// Add, Sub, HadamardProd (and Mul by a scalar), Div, and the >= of
	// Rectify.
	"elemBinOp":   {"+", "-", "⊙", "÷", ">="},
	"elemUnaryOp": {"tanh", "sigmoid", "abs", "sqrt", "ln", "exp", "square", "neg", "softplus"},
}

// description is what named matches: linear-algebra ops by their whole
// description, element-wise ops by their symbol.
func description(t string, op gorgonia.Op) string {
	d := op.String()
	if t == "linAlgBinOp" {
		return d
	}
	if i := strings.IndexByte(d, ' '); i >= 0 {
		return d[:i]
	}
	return d
}

// refusedOps explain why an op cannot be made exact per example.
var refusedOps = map[string]string{
	"BatchNormOp":     "mixes the examples of a batch (batch statistics), so one example's gradient depends on the others",
	"batchnormDiffOp": "mixes the examples of a batch (batch statistics), so one example's gradient depends on the others",
	"dropoutOp":       "draws random numbers, which this adapter does not key per example; drop it or apply it outside the private gradient",
	"randomOp":        "draws random numbers, which this adapter does not key per example",
}

// Supported lists the gorgonia op types New accepts, with the accepted
// descriptions of the matrix-product and element-wise types
// ("elemUnaryOp: tanh").
func Supported() []string {
	var out []string
	for _, t := range supportedOps {
		if ds, ok := named[t]; ok {
			for _, d := range ds {
				out = append(out, t+": "+d)
			}
			continue
		}
		out = append(out, t)
	}
	return out
}

// OpError is the error of New for an op it refuses. It matches
// dpcore.ErrInvalid.
type OpError struct {
	Node   string // the node's name
	Op     string // the op's type and description
	Reason string
}

func (e *OpError) Error() string {
	return fmt.Sprintf("node %s: op %s %s", e.Node, e.Op, e.Reason)
}

func (e *OpError) Unwrap() error { return dpcore.ErrInvalid }

// opType is the op's Go type name without package and pointer.
func opType(op gorgonia.Op) string {
	t := fmt.Sprintf("%T", op)
	t = strings.TrimPrefix(t, "*")
	return strings.TrimPrefix(t, "gorgonia.")
}

// oneLine keeps an op's or node's description on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// checkOps refuses the first node whose op is not supported.
func checkOps(nodes gorgonia.Nodes) error {
	for _, n := range nodes {
		op := n.Op()
		if op == nil {
			continue
		}
		t := opType(op)
		desc := oneLine(fmt.Sprintf("%s (%s)", t, op))
		name := oneLine(n.Name())
		if why, ok := refusedOps[t]; ok {
			return &OpError{Node: name, Op: desc, Reason: why}
		}
		if !slices.Contains(supportedOps, t) {
			return &OpError{Node: name, Op: desc, Reason: "has no tested per-example rule here (gorgoniadp.Supported lists the ops that do)"}
		}
		if ds, ok := named[t]; ok && !slices.Contains(ds, description(t, op)) {
			return &OpError{Node: name, Op: desc, Reason: "has no tested per-example rule here (gorgoniadp.Supported lists the ops that do)"}
		}
	}
	return nil
}
