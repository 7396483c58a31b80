package gorgoniadp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"strings"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// architecture describes the graph New prepared as one line per node the
// loss depends on, children before parents (depth first from the loss,
// arguments in order): the op as gorgonia's function and its parameters
// (op.String), the shape, and the argument lines; the input, the label
// and the parameters (by their place in Params, name and shape) as
// leaves; other input nodes by their values (constants). Two graphs with
// the same lines compute the same function of the same parameters.
func (m *Model) architecture() []string {
	index := map[*gorgonia.Node]int{}
	params := map[*gorgonia.Node]int{}
	for i, p := range m.g.Params {
		params[p] = i
	}
	var lines []string
	var visit func(n *gorgonia.Node) int
	visit = func(n *gorgonia.Node) int {
		if i, ok := index[n]; ok {
			return i
		}
		var args []string
		if n.Op() != nil {
			for _, c := range children(n) {
				args = append(args, fmt.Sprint(visit(c)))
			}
		}
		var what string
		switch i, isParam := params[n]; {
		case n == m.g.Input:
			what = "input"
		case n == m.g.Label:
			what = "label"
		case isParam:
			what = fmt.Sprintf("parameter %d %q", i, n.Name())
		case n.Op() == nil:
			what = "constant " + valueDigest(n.Value())
		default:
			what = fmt.Sprintf("%s %s", apiName(n.Op()), strings.Join(strings.Fields(n.Op().String()), " "))
		}
		line := fmt.Sprintf("%s %v %v", what, n.Dtype(), n.Shape())
		if len(args) > 0 {
			line += " of " + strings.Join(args, ", ")
		}
		index[n] = len(lines)
		lines = append(lines, line)
		return index[n]
	}
	visit(m.g.Loss)
	visit(m.g.Logits)
	return lines
}

// valueDigest describes a constant: a scalar by its value, a tensor by
// its shape and a hash of its values.
func valueDigest(v gorgonia.Value) string {
	if v == nil {
		return "(no value)"
	}
	f, err := float32s(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	if _, scalar := v.(gorgonia.Scalar); scalar || len(f) == 1 {
		return fmt.Sprint(f[0])
	}
	h := fnv.New64a()
	var b [4]byte
	for _, x := range f {
		u := math.Float32bits(x)
		b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
		h.Write(b[:])
	}
	shape := tensor.Shape{len(f)}
	if d, ok := v.(*tensor.Dense); ok {
		shape = d.Shape()
	}
	return fmt.Sprintf("%v fnv64a %x", shape, h.Sum64())
}

// Digest is the SHA-256 (hex) of the graph's architecture: its ops, their
// parameters and shapes, and the parameters' order, names and shapes,
// not their values. Files written by Save record it (with the
// description), and Load refuses a file of another architecture.
func (m *Model) Digest() string { return m.digest }

func digestOf(lines []string) string {
	h := sha256.New()
	for _, l := range lines {
		fmt.Fprintf(h, "%d:%s\n", len(l), l)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// archDifference names the first difference between a file's
// architecture and the graph's.
func archDifference(file, graph []string) string {
	for i := range min(len(file), len(graph)) {
		if file[i] != graph[i] {
			return fmt.Sprintf("node %d is %s in the file, %s in the graph", i, file[i], graph[i])
		}
	}
	return fmt.Sprintf("the file's graph has %d nodes, this one %d", len(file), len(graph))
}
