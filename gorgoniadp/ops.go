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
	"avgPoolOp",      // AveragePool2D (only compiled)
	"dropoutOp",      // Dropout (only compiled)
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
	"randomOp":        "draws random numbers, which this adapter does not key per example",
}

// Supported lists the gorgonia functions whose ops New accepts, named as
// in gorgonia's API ("Mul", "Tanh", "Gte (as in Rectify)", ...).
func Supported() []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, t := range supportedOps {
		switch ds, ok := named[t]; {
		case ok:
			for _, d := range ds {
				switch {
				case t == "linAlgBinOp" && d == "A × B":
					add("Mul")
				case t == "linAlgBinOp":
					add("Mul with a transposed operand (as in Conv2d)")
				case d == ">=":
					add("Gte (as in Rectify)")
					add("LeakyRelu")
				default:
					add(apiNames[d])
				}
			}
		case t == "softmaxOp":
			add("SoftMax")
			add("LogSoftMax")
		case t == "im2colOp":
			add("Im2Col (and Conv2d)")
		default:
			add(apiNames[t])
		}
	}
	return out
}

// OpError is the error of New for an op it refuses. It matches
// dpcore.ErrInvalid.
type OpError struct {
	Node   string // the node's name
	Op     string // the gorgonia function that makes the op (Pow, LeakyRelu, ...)
	Reason string
}

func (e *OpError) Error() string {
	// gorgonia names unnamed nodes by their op and arguments ("tanh(%3)"):
	// only a name the user gave helps.
	if e.Node == "" || strings.Contains(e.Node, "%") {
		return fmt.Sprintf("%s %s", e.Op, e.Reason)
	}
	return fmt.Sprintf("%s (node %s) %s", e.Op, e.Node, e.Reason)
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
		desc := userOp(n)
		name := oneLine(n.Name())
		if why, ok := refusedOps[t]; ok {
			return &OpError{Node: name, Op: desc, Reason: why}
		}
		if !slices.Contains(supportedOps, t) {
			return &OpError{Node: name, Op: desc, Reason: "has no tested per-example rule here (gorgoniadp.Supported lists the ops that do)"}
		}
		if desc == leakyLt {
			continue // x < 0 in LeakyRelu (TestPerExample's dense-leakyrelu)
		}
		if ds, ok := named[t]; ok && !slices.Contains(ds, description(t, op)) {
			return &OpError{Node: name, Op: desc, Reason: "has no tested per-example rule here (gorgoniadp.Supported lists the ops that do)"}
		}
	}
	return nil
}
