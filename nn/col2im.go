package nn

// An im2col convolution's input gradient is the product of the output
// gradient with the transposed weight (rows × fi floats), added back into
// the input map by col2im. For WRN-16-4's 8x8 layers that product is 1.2
// MB a chunk of two examples, more than half of L2 next to the 2.4 MB
// weight it streams: written to memory and read back by col2im, it made
// the product run 1.5x slower in the step than alone. Computed a kernel
// row at a time (K products of rows × KC), each block is added back while
// it is still in cache. Every element of a block has the bits of the whole
// product's (same depth, same summation), and col2im over the kernel rows
// from the last to the first adds each input pixel's terms in the order
// of the output pixels, as the whole col2im does: the input gradient is
// the same bit for bit (TestCol2imRows).

// col2imMin is the packed weight size from which the input gradient is
// computed a kernel row at a time: half of L2 (2 MiB a core).
const col2imMin = 1 << 20

// col2imRows reports whether im2col convolution s computes its input
// gradient a kernel row at a time (inputGradRows).
func (p *Plan) col2imRows(s *stage) bool {
	if s.kind != kConv || s.implicit || s.src == 0 || s.k < 2 || p.opt.col2imRows < 0 {
		return false
	}
	return p.opt.col2imRows > 0 || 4*s.fi*s.fo >= col2imMin
}

// inputGradRows writes the input gradient din of the m examples whose
// output gradients are G (m*P rows of fo) a kernel row at a time, last to
// first: each row's block of the product, then its share of col2im.
func (p *Plan) inputGradRows(w *worker, s *stage, m int, G, din []float32) {
	KC := s.k * s.in.C
	isz := s.in.Size()
	du := w.du[:m*s.P*KC]
	for kr := s.k - 1; kr >= 0; kr-- {
		w.sgemmPacked(m*s.P, G, s.fo, &s.pwk[kr], 0, du, KC)
		for j := range m {
			dj := din[j*isz : (j+1)*isz]
			if kr == s.k-1 {
				clear(dj)
			}
			s.unfoldRows(dj, du[j*s.P*KC:(j+1)*s.P*KC], true, kr, kr+1, KC)
		}
	}
}
