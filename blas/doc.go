// Package blas provides fast pure-Go (no cgo) general matrix products,
// Sgemm and Dgemm, for the engine's layers (package nn), the dense linear
// algebra of the mfnoise factorization optimizers and, through
// gorgoniadp.InstallBLAS, gorgonia graphs.
//
// The products are built the way optimized BLAS libraries build them
// (Goto and van de Geijn, "Anatomy of high-performance matrix
// multiplication", ACM TOMS 2008): C is computed in cache-sized blocks,
// panels of B are packed into contiguous, zero-padded buffers, and a
// register-blocked micro-kernel written in Go assembly computes an MR×NR
// tile of C with fused multiply-adds. A is packed too when it is reused by
// many panels of B; otherwise (skinny products such as convolution
// layers) the kernel reads it in place. On amd64 the kernel is chosen at
// run time: AVX-512 when the CPU and OS support it, otherwise AVX2+FMA,
// otherwise a portable Go kernel. Other architectures, and builds with the
// purego tag, use the portable kernel. Large products are split across
// GOMAXPROCS goroutines; products of a few hundred flops go to gonum.
//
// For the implicit convolutions of package nn, Serial32 also makes
// products whose A has overlapping rows (SgemmOverlapA), whose sum over k
// skips periodic steps (PackB32Runs) and which compute only periodic runs
// of rows (SgemmPackedRows, on an 8-row AVX-512 tile): the garbage columns
// and rows of a wide map are skipped with the bits of the whole product.
//
// The AVX-512 float32 kernels prefetch into L2, a share per row tile,
// the next packed micro-panel of B (a weight larger than L2 comes from
// memory once a product, and its first row tile would otherwise wait on
// it) and, for a transposed A, the rows of the tile after next
// (PackedB32.SetPrefetch turns both off; the values do not change).
//
// The functions follow gonum's row-major BLAS conventions
// (gonum.org/v1/gonum/blas/gonum) exactly, including the panics on invalid
// arguments, so that Implementation can stand in for gonum's native BLAS.
// Implementation also routes the bulk of Ssyrk/Dsyrk and Strsm/Dtrsm
// through the fast products. Install registers it with gonum's
// blas32/blas64 packages (and hence mat and lapack64);
// gorgoniadp.InstallBLAS also registers it with gorgonia and gorgonia's
// tensor package (this package does not import gorgonia).
package blas
