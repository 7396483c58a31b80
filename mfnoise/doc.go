// Package mfnoise holds the matrix-factorization view of private training:
// workloads (the linear map an optimizer applies to the gradient stream),
// encoders and decoders, their sensitivity under a participation schema,
// losses, and the closed-form and optimized mechanisms. Package noise
// streams a mechanism's correlated noise in gradient space from the
// structure a Factorization or Toeplitz carries; this package does not
// depend on it.
//
// The mathematics follows docs/math.md (cited as "SPEC n"): a workload A
// (n x n, lower triangular) is factorized as A = B C; the mechanism releases
// B (C X + Z). Training never materializes B: it adds W = C^-1 Z (C^+ Z for
// tall C, made by package noise) to the clipped gradients and lets the
// optimizer apply A. Privacy depends only on C and the participation
// schema (Denisov et al. 2022, Thm 2.1).
//
// A mechanism is a typed value that builds itself (Mechanism): each family
// is a type (DPSGD, Tree, FFT, MFSingle, MFKB, BandMF, Sqrt,
// BandedToeplitz, BLT, BISR, Stamped) whose Build returns a
// dpcore.Strategy, the dense *Factorization or the O(n)
// *toeplitz.Strategy. Compare scores any mechanism from its strategy; names
// are parsed only by privacy.ParseMechanism.
//
// The optimizers (OptimizeSingle, OptimizeKB, OptimizeBanded) spend their
// time in Cholesky and LU factorizations, triangular solves and matrix
// products through gonum's process-wide BLAS. Call blas.Install (package
// github.com/dpmf-go/dpmf/blas) once in main to run them on its fast GEMM,
// as cmd/train does: several times faster than gonum's own at n = 2000.
package mfnoise
