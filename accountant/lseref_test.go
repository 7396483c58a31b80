package accountant

import "math"

// lseConvRef is the straightforward lseConv (before its loops were
// tightened), the reference of TestLSEConvAgrees. It returns the distribution of log(e^a + e^b) for independent a ~ A
// and b ~ B, on the grid, rounded as o was built, then trimmed: the
// outermost cells holding at most tau on each side go to inf.
func lseConvRef(a, b logGrid, o lseOffsets, tau float64) logGrid {
	endA, endB := a.off+len(a.p)-1, b.off+len(b.p)-1
	lo := max(a.off, b.off) + o.add[len(o.add)-1]
	hi := max(endA, endB) + o.add[0]
	out := make([]float64, hi-lo+1)
	pa, pb := prefix(a.p), prefix(b.p)
	// spread adds, for every index I of x (the larger value, ties
	// included when strict is false), x's mass times y's mass over the
	// indices J = I - d, d in each group, at I + c: group by group, a
	// streaming pass over I.
	spread := func(x logGrid, y logGrid, py []float64, strict bool) {
		endX, endY := x.off+len(x.p)-1, y.off+len(y.p)-1
		for g, d0 := range o.from {
			if strict && d0 == 0 {
				d0 = 1
			}
			d1 := math.MaxInt // d < d1
			if g+1 < len(o.from) {
				d1 = o.from[g+1]
			}
			if d0 >= d1 {
				continue
			}
			// J = I - d in [y.off, endY] and d in [d0, d1): I from y.off + d0.
			iLo := max(x.off, y.off+d0)
			if iLo > endX {
				break
			}
			shift := o.add[g] - lo
			xp := x.p[iLo-x.off:]
			for k, v := range xp {
				I := iLo + k
				jHi := min(I-d0, endY)
				jLo := y.off
				if d1 != math.MaxInt && I-d1+1 > jLo {
					jLo = I - d1 + 1
				}
				if jLo > jHi {
					continue
				}
				if m := py[jHi-y.off+1] - py[jLo-y.off]; m > 0 {
					out[I+shift] += v * m
				}
			}
		}
	}
	spread(a, b, pb, false)
	spread(b, a, pa, true)
	r := logGrid{off: lo, p: out, inf: a.inf + b.inf - a.inf*b.inf}
	return r.trim(tau)
}
