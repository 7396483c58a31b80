package nn

import (
	gblas "gonum.org/v1/gonum/blas"

	"github.com/dpmf-go/dpmf/blas"
)

// Stride-2 implicit convolutions. A 3x3 convolution of stride 2 and
// padding 1 on a map of even height and width (WideResNets' downsampling
// convolutions) runs on the zero-bordered map xp as the stride-1 ones do
// (implicit.go), with two changes of layout:
//
//   - xp holds the bordered rows of even index first, then the odd ones
//     (padInto). Output pixel (oh, ow) reads, for kernel row kr, the
//     window of 3 pixels at column 2 ow of bordered row 2 oh + kr: row
//     oh + kr/2 of the kr%2 half. So the windows of kernel row kr are rows
//     2C floats apart starting at offX[kr], and the forward product and
//     the weight gradient are the stride-1 ones with lda 2C, over wide
//     rows of wq = (W+2)/2 pixels (one garbage column a row).
//   - The input gradient (the transposed convolution) splits by the
//     parity of the input pixel. With G the output gradient in gp, in the
//     top left of a map of wq columns and one more row (the extra column
//     and row zero), and W_{kr,kc} the C x fo block of the weight for
//     kernel tap (kr, kc):
//     dx[2i, 2j]     = G[i, j] W_{1,1}ᵀ
//     dx[2i, 2j+1]   = G[i, j] W_{1,2}ᵀ + G[i, j+1] W_{1,0}ᵀ
//     dx[2i+1, 2j]   = G[i+1, j] W_{0,1}ᵀ + G[i, j] W_{2,1}ᵀ
//     dx[2i+1, 2j+1] = G[i+1, j] W_{0,2}ᵀ + G[i+1, j+1] W_{0,0}ᵀ
//     + G[i, j] W_{2,2}ᵀ + G[i, j+1] W_{2,0}ᵀ
//     Row (i, j) of a product's A is pixel (i, j) of gp (fo floats) or
//     pixels (i, j) and (i, j+1) (2 fo floats, contiguous): rows fo
//     apart, as in the stride-1 input gradient. Its output row is the
//     two input pixels (2j, 2j+1), 2C floats, so that the wide rows of
//     one parity of input rows are, compacted, those rows of dx. Six
//     products of N = C (stride2Blocks), the same multiply-adds as
//     im2col's input gradient plus the garbage column.
//
// The forward values and weight gradients are the same sums as im2col's,
// over the kernel rows and the wide rows in another order (the dense-
// reference tolerance, TestImplicitConvolution); the bias gradient is
// the same bit for bit (float64 sums, with zeros for the garbage column).

// stride2 reports whether a convolution is a stride-2 one the implicit
// products take: 3x3, padding 1, even input height and width.
func (s *stage) stride2() bool {
	return s.kind == kConv && s.stride == 2 && s.k == 3 && s.pad == 1 && s.in.H%2 == 0 && s.in.W%2 == 0
}

// stride2Block is one of the stride-2 input gradient's products: the
// weight taps (kernel row kr, columns kcs, stacked as fo-row blocks of
// Wᵀ), the gp row offset dr of its A, and the half of the output row (the
// even or the odd input pixel) it writes.
type stride2Block struct {
	kr, dr int
	kcs    []int
	odd    bool
}

// stride2Blocks are the six products: even input rows first (one kernel
// row), then the odd ones (two, summed: offsets dr 1 then 0 for each half).
var stride2Blocks = [...]stride2Block{
	{kr: 1, dr: 0, kcs: []int{1}},
	{kr: 1, dr: 0, kcs: []int{2, 0}, odd: true},
	{kr: 0, dr: 1, kcs: []int{1}},
	{kr: 2, dr: 0, kcs: []int{1}},
	{kr: 0, dr: 1, kcs: []int{2, 0}, odd: true},
	{kr: 2, dr: 0, kcs: []int{2, 0}, odd: true},
}

// packStride2 writes the six blocks' stacked Wᵀ into wflip and packs
// them into pwx.
func (s *stage) packStride2() {
	C, fo := s.in.C, s.fo
	off := 0
	for b, blk := range stride2Blocks {
		n := len(blk.kcs) * fo * C
		dst := s.wflip[off : off+n]
		for p, kc := range blk.kcs {
			src := s.wp[(blk.kr*3+kc)*C*fo:]
			for c := range C {
				for o, v := range src[c*fo : (c+1)*fo] {
					dst[(p*fo+o)*C+c] = v
				}
			}
		}
		blas.PackB32(gblas.NoTrans, len(blk.kcs)*fo, C, 1, dst, C, &s.pwx[b])
		off += n
	}
}

// stride2InputGrad writes example j's input gradient of stride-2 stage i
// from its output gradient gp, one parity of input rows at a time through
// wide (2C floats a row).
func (p *Plan) stride2InputGrad(w *worker, i, j int, gp, wide, din []float32) {
	s := &p.stages[i]
	C, fo := s.in.C, s.fo
	var offs [2]int
	for par := range 2 {
		blocks := s.pwx[:2]
		if par == 1 {
			blocks = s.pwx[2:]
		}
		// Two products a half row (one for even rows), each a sum over
		// its kernel rows.
		n := len(blocks) / 2
		for half := range 2 {
			bs := blocks[half*n : (half+1)*n]
			for k := range n {
				offs[k] = stride2Blocks[2*par+half*n+k].dr * s.wq * fo
			}
			p.kernelRows(w, s.wideM, gp, fo, offs[:n], bs, wide[half*C:], 2*C)
		}
		for ih := par; ih < s.in.H; ih += 2 {
			p.emitInputRow(w, i, j, ih, wide[(ih/2)*s.wq*2*C:], din)
		}
	}
}
