package optimize

import (
	"errors"
	"math"
)

var (
	errNoFunc    = errors.New("optimize: the problem has no objective")
	errNotFinite = errors.New("optimize: the objective is not finite at the start")
)

// memory is the limited-memory inverse-Hessian model of L-BFGS (Nocedal
// and Wright, Alg. 7.4), its two-loop recursion on the blocked parallel
// vector operations of vec.go.
type memory struct {
	s, y      [][]float64
	rho       []float64
	head, cnt int
	alpha     []float64
	precond   func(d []float64)
	weight    []float64
}

func newMemory(m, dim int, precond func(d []float64), weight []float64) *memory {
	l := &memory{s: make([][]float64, m), y: make([][]float64, m), rho: make([]float64, m), alpha: make([]float64, m), precond: precond, weight: weight}
	for i := range l.s {
		l.s[i] = make([]float64, dim)
		l.y[i] = make([]float64, dim)
	}
	return l
}

func (l *memory) len() int { return l.cnt }
func (l *memory) reset()   { l.cnt = 0 }

// push adds the pair (s, y) if it has positive curvature (always, for a
// convex objective, up to round-off).
func (l *memory) push(s, y []float64) {
	sy := dot(s, y)
	if !(sy > 1e-12*math.Sqrt(dot(s, s)*dot(y, y))) {
		return
	}
	m := len(l.s)
	l.head = (l.head + 1) % m
	copy(l.s[l.head], s)
	copy(l.y[l.head], y)
	l.rho[l.head] = 1 / sy
	l.cnt = min(l.cnt+1, m)
}

// direction writes -H g to d.
func (l *memory) direction(d, g []float64) {
	copy(d, g)
	m := len(l.s)
	for c := 0; c < l.cnt; c++ {
		i := (l.head - c + m) % m
		l.alpha[i] = l.rho[i] * dot(l.s[i], d)
		axpy(d, -l.alpha[i], l.y[i])
	}
	if l.precond != nil {
		l.precond(d)
	}
	if l.cnt > 0 {
		h := l.head
		yy := 0.0
		if l.weight != nil {
			yy = weightedSquares(l.weight, l.y[h])
		} else {
			yy = dot(l.y[h], l.y[h])
		}
		scale(d, 1/(l.rho[h]*yy))
	}
	for c := l.cnt - 1; c >= 0; c-- {
		i := (l.head - c + m) % m
		beta := l.rho[i] * dot(l.y[i], d)
		axpy(d, l.alpha[i]-beta, l.s[i])
	}
	scale(d, -1)
}
