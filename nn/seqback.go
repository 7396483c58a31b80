package nn

import (
	"math"

	gblas "gonum.org/v1/gonum/blas"
)

// ex returns the materialized per-example gradient of q, or nil when q
// is not trained or is a ghost weight.
func (p *SeqPlan) exSlice(w *seqWorker, q Param) []float32 {
	if q.Len == 0 {
		return nil
	}
	off, ok := p.exOf[q.Offset]
	if !ok {
		return nil
	}
	return w.ex[off : off+q.Len]
}

// lnBack takes dy w.r.t. a LayerNorm's output and writes (or adds, with
// add) the gradient w.r.t. its input into dx; a trained norm's
// per-example weight and bias gradients go to ex.
func (p *SeqPlan) lnBack(w *seqWorker, n Norm, dy, xh []float32, r []float64, dx []float32, L int, add bool) {
	D := p.t.Dim
	g := p.params[n.Weight.Offset : n.Weight.Offset+D]
	if eg := p.exSlice(w, n.Weight); eg != nil {
		eb := p.exSlice(w, n.Bias)
		acc := w.nacc[:2*D]
		clear(acc)
		for t := range L {
			dr, xr := dy[t*D:(t+1)*D], xh[t*D:(t+1)*D]
			for k, v := range dr {
				acc[k] += float64(v) * float64(xr[k])
				acc[D+k] += float64(v)
			}
		}
		for k := range D {
			eg[k], eb[k] = float32(acc[k]), float32(acc[D+k])
		}
	}
	inv := 1 / float64(D)
	for t := range L {
		dr, xr, out := dy[t*D:(t+1)*D], xh[t*D:(t+1)*D], dx[t*D:(t+1)*D]
		m1, m2 := 0.0, 0.0
		for k, v := range dr {
			a := float64(v) * float64(g[k])
			m1 += a
			m2 += a * float64(xr[k])
		}
		m1 *= inv
		m2 *= inv
		rs := r[t]
		for k, v := range dr {
			a := float64(v) * float64(g[k])
			d := float32(rs * (a - m1 - float64(xr[k])*m2))
			if add {
				out[k] += d
			} else {
				out[k] = d
			}
		}
	}
}

// linBack takes G (L x out), the gradient w.r.t. linear li's output for
// input X, writes (or adds) the gradient w.r.t. X into dX unless it is
// nil, and records the per-example gradients of its trained parameters.
func (p *SeqPlan) linBack(w *seqWorker, li int, X, G, dX []float32, L int, add bool) {
	s := &w.lin[li]
	var beta float32
	if add {
		beta = 1
	}
	if dX != nil {
		w.sgemmPacked(L, G, s.out, &p.pk[li].b, beta, dX, s.in)
	}
	if s.l.LoRAA.Len > 0 {
		r := p.t.LoRARank
		sc := p.loraScale()
		A := p.params[s.l.LoRAA.Offset : s.l.LoRAA.Offset+s.l.LoRAA.Len]
		B := p.params[s.l.LoRAB.Offset : s.l.LoRAB.Offset+s.l.LoRAB.Len]
		w.sgemm(gblas.NoTrans, gblas.Trans, L, r, s.out, 1, G, s.out, B, s.out, 0, w.v, r)
		if dX != nil {
			w.sgemm(gblas.NoTrans, gblas.Trans, L, s.in, r, sc, w.v, r, A, r, 1, dX, s.in)
		}
		if s.trainA {
			w.sgemm(gblas.Trans, gblas.NoTrans, s.in, r, L, sc, X, s.in, w.v, r, 0, w.ex[s.aEx:], r)
			w.sgemm(gblas.Trans, gblas.NoTrans, r, s.out, L, sc, w.u[li], r, G, s.out, 0, w.ex[s.bbEx:], s.out)
		}
	}
	if !s.trainW {
		return
	}
	if s.ghost >= 0 {
		copy(w.g[s.ghost][:L*s.out], G[:L*s.out])
		w.gX[s.ghost] = X[:L*s.in]
	} else {
		w.sgemm(gblas.Trans, gblas.NoTrans, s.in, s.out, L, 1, X, s.in, G, s.out, 0, w.ex[s.wEx:], s.out)
	}
	if s.bEx >= 0 {
		acc := w.nacc[:s.out]
		clear(acc)
		for t := range L {
			for k, v := range G[t*s.out : (t+1)*s.out] {
				acc[k] += float64(v)
			}
		}
		for k, v := range acc {
			w.ex[s.bEx+k] = float32(v)
		}
	}
}

// attnBack takes datt (L x Dim) and writes the gradient w.r.t. qkv. A
// causal attention's products skip the blocks above the diagonal, as the
// forward's (attnRows): dP and dQ per row block over the keys it sees,
// dV and dK per key block over the rows that see it.
func (p *SeqPlan) attnBack(w *seqWorker, qkv, P, datt, dqkv []float32, L int) {
	D, nh := p.t.Dim, p.t.Heads
	dh := D / nh
	scale := float32(1 / math.Sqrt(float64(dh)))
	for h := range nh {
		Q, K, V := qkv[h*dh:], qkv[D+h*dh:], qkv[2*D+h*dh:]
		S := P[h*L*L : (h+1)*L*L]
		dP := w.dp[:L*L]
		dO := datt[h*dh:]
		for r0 := 0; r0 < L; {
			r1, keys := p.attnRows(r0, L)
			w.sgemm(gblas.NoTrans, gblas.Trans, r1-r0, keys, dh, 1, dO[r0*D:], D, V, 3*D, 0, dP[r0*L:], L)
			for t := r0; t < r1; t++ {
				pr, dr := S[t*L:(t+1)*L], dP[t*L:(t+1)*L]
				n := L
				if p.t.Causal {
					n = t + 1
				}
				s := 0.0
				for k, v := range pr[:n] {
					s += float64(v) * float64(dr[k])
				}
				for k, v := range pr[:n] {
					dr[k] = float32(float64(v) * (float64(dr[k]) - s))
				}
				clear(dr[n:])
			}
			w.sgemm(gblas.NoTrans, gblas.NoTrans, r1-r0, dh, keys, scale, dP[r0*L:], L, K, 3*D, 0, dqkv[r0*3*D+h*dh:], 3*D)
			r0 = r1
		}
		// dV = P^T dO and dK = scale dP^T Q: key block [c0, c1) from the
		// rows that see it (all rows, or from c0 on when causal).
		for c0 := 0; c0 < L; {
			c1, _ := p.attnRows(c0, L)
			from := 0
			if p.t.Causal {
				from = c0
			}
			w.sgemm(gblas.Trans, gblas.NoTrans, c1-c0, dh, L-from, 1, S[from*L+c0:], L, dO[from*D:], D, 0, dqkv[c0*3*D+2*D+h*dh:], 3*D)
			w.sgemm(gblas.Trans, gblas.NoTrans, c1-c0, dh, L-from, scale, dP[from*L+c0:], L, Q[from*3*D:], 3*D, 0, dqkv[c0*3*D+D+h*dh:], 3*D)
			c0 = c1
		}
	}
}

// backward runs the backward pass of the example forward last ran, from
// the logits' gradient in w.dbig.
func (p *SeqPlan) backward(w *seqWorker, L int) {
	t := &p.t
	D, Hd := t.Dim, t.Hidden
	head := len(w.lin) - 1
	dhf := w.dh // gradient w.r.t. hf
	switch {
	case t.Classes > 0:
		clear(dhf[:L*D])
		r := p.poolRow(L)
		p.linBack(w, head, w.hf[r*D:(r+1)*D], w.dbig, dhf[r*D:(r+1)*D], 1, false)
	case t.Head.Weight.Len > 0:
		p.linBack(w, head, w.hf, w.dbig, dhf, L, false)
	default:
		V := t.Vocab
		w.sgemmPacked(L, w.dbig, V, &p.wteB, 0, dhf, D)
		if e := p.exSlice(w, t.Wte); e != nil {
			// The tied output embedding's gradient dlogits^T hf; the
			// input embedding's rows are added below.
			w.sgemm(gblas.Trans, gblas.NoTrans, V, D, L, 1, w.dbig, V, w.hf, D, 0, e, D)
		}
	}
	dout := w.dh2 // gradient w.r.t. the current block's output
	if !t.PostNorm {
		p.lnBack(w, t.Final, dhf, w.xhF, w.rF, dout, L, false)
	} else {
		copy(dout[:L*D], dhf[:L*D])
	}
	// dout and dh swap roles per block: the input gradient of block bi is
	// the output gradient of block bi-1.
	dmid, da := w.dh, w.da
	df := w.dbig[:L*Hd]
	for bi := len(t.Blocks) - 1; bi >= 0; bi-- {
		b := &t.Blocks[bi]
		li := 4 * bi
		if !t.PostNorm {
			p.linBack(w, li+3, w.f[bi], dout, df, L, false)
			p.geluGrad(w.z[bi][:L*Hd], w.th[bi], df)
			p.linBack(w, li+2, w.a2[bi], df, da, L, false)
			copy(dmid[:L*D], dout[:L*D])
			p.lnBack(w, b.Ln2, da, w.xh2[bi], w.r2[bi], dmid, L, true)
			p.linBack(w, li+1, w.att[bi], dmid, da, L, false)
			p.attnBack(w, w.qkv[bi], w.p[bi], da, w.dqkv, L)
			p.linBack(w, li, w.a1[bi], w.dqkv, da, L, false)
			// the block input's gradient: dmid + ln_1's backward of da.
			p.lnBack(w, b.Ln1, da, w.xh1[bi], w.r1[bi], dmid, L, true)
		} else {
			ds2 := dmid
			p.lnBack(w, b.Ln2, dout, w.xh2[bi], w.r2[bi], ds2, L, false)
			p.linBack(w, li+3, w.f[bi], ds2, df, L, false)
			p.geluGrad(w.z[bi][:L*Hd], w.th[bi], df)
			p.linBack(w, li+2, w.a1[bi], df, da, L, false)
			for k := range L * D {
				da[k] += ds2[k]
			}
			p.lnBack(w, b.Ln1, da, w.xh1[bi], w.r1[bi], dout, L, false) // dout := dmid
			p.linBack(w, li+1, w.att[bi], dout, da, L, false)
			p.attnBack(w, w.qkv[bi], w.p[bi], da, w.dqkv, L)
			copy(dmid[:L*D], dout[:L*D])
			p.linBack(w, li, w.in[bi], w.dqkv, dmid, L, true)
		}
		dout, dmid = dmid, dout
	}
	// dout is the gradient w.r.t. the first block's input.
	if t.FreezeBase {
		return
	}
	dh0 := dout
	if t.PostNorm {
		p.lnBack(w, t.Final, dout, w.xh0, w.r0, dmid, L, false)
		dh0 = dmid
	}
	ew := p.exSlice(w, t.Wte)
	if t.Classes > 0 || t.Head.Weight.Len > 0 {
		clear(ew) // untied: only the looked-up rows
	}
	for k := range L {
		row := ew[w.ids[k]*D : (w.ids[k]+1)*D]
		for j, v := range dh0[k*D : (k+1)*D] {
			row[j] += v
		}
	}
	if e := p.exSlice(w, t.Wpe); e != nil {
		copy(e[:L*D], dh0[:L*D])
		clear(e[L*D:])
	}
}

// norms fills w.sq with the example's squared norms per group.
func (p *SeqPlan) norms(w *seqWorker, L int) {
	clear(w.sq)
	for _, pc := range p.pieces {
		w.sq[pc.unit] += sumsq64(w.ex[pc.off : pc.off+pc.p.Len])
	}
	for gi, g := range p.ghosts {
		X, G := w.gX[gi], w.g[gi]
		L := len(X) / g.in // the rows it saw (1 for a classifier's head)
		xd, gd := w.xd[:L*g.in], w.gd[:L*g.out]
		widenTo(xd, X[:L*g.in])
		widenTo(gd, G[:L*g.out])
		gx, gg := w.gx[:L*L], w.gg[:L*L]
		w.dgemm(gblas.NoTrans, gblas.Trans, L, L, g.in, 1, xd, g.in, xd, g.in, 0, gx, L)
		w.dgemm(gblas.NoTrans, gblas.Trans, L, L, g.out, 1, gd, g.out, gd, g.out, 0, gg, L)
		s, tx, tg := gramSums(gx, gg, L)
		// The bound of recompute.go's ghost convolutions: what
		// accumulate adds, Xᵀ G' with G' rounded, is not the vector
		// whose ghost norm s is.
		y, ratio := ghostBound(s, tx, tg, g.in+g.out+L*L+L*(g.in+g.out), L*g.out)
		w.sq[g.unit] += y * y
		w.gr[gi] = ratio
	}
}

// accumulate adds the example's gradient, scaled by its factors, into
// the worker's sum.
func (p *SeqPlan) accumulate(w *seqWorker, L int) {
	for _, pc := range p.pieces {
		if Factor32(w.c[pc.unit]) == 0 {
			continue
		}
		addScaledDown(w.acc[pc.p.Offset:pc.p.Offset+pc.p.Len], w.ex[pc.off:pc.off+pc.p.Len], w.c[pc.unit])
	}
	for gi, g := range p.ghosts {
		if Factor32(w.c[g.unit]) == 0 {
			continue
		}
		L := len(w.gX[gi]) / g.in
		G := w.g[gi][:L*g.out]
		ghostScale(G, w.c[g.unit], w.gr[gi])
		w.sgemm(gblas.Trans, gblas.NoTrans, g.in, g.out, L, 1, w.gX[gi], g.in, G, g.out, 1, w.acc[g.w.Offset:], g.out)
	}
}

// capture writes the example's unclipped gradient into out.
func (p *SeqPlan) capture(w *seqWorker, L int, out []float32) {
	clear(out)
	for _, pc := range p.pieces {
		copy(out[pc.p.Offset:pc.p.Offset+pc.p.Len], w.ex[pc.off:pc.off+pc.p.Len])
	}
	for gi, g := range p.ghosts {
		L := len(w.gX[gi]) / g.in
		w.sgemm(gblas.Trans, gblas.NoTrans, g.in, g.out, L, 1, w.gX[gi], g.in, w.g[gi], g.out, 0, out[g.w.Offset:], g.out)
	}
}
