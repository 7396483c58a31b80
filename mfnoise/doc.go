// Package mfnoise builds correlated-noise mechanisms by matrix
// factorization: each mechanism family is a type that builds its strategy
// A = B C (encoder C, decoder B) for a workload A under a participation
// schema, and Optimize is the one door to the optimizers that find the
// encoders with the least loss. Package noise streams a built strategy's
// noise in gradient space and package privacy plans a run around it; this
// package depends on neither.
//
// The mathematics follows docs/math.md (cited as "SPEC n"): a workload A
// (n x n, lower triangular; dpcore.Workload) is factorized as A = B C; the
// mechanism releases B (C X + Z). Training never materializes B: it adds
// W = C^-1 Z (C^+ Z for tall C, made by package noise) to the clipped
// gradients and lets the optimizer apply A. Privacy depends only on C and
// the participation schema (Denisov et al. 2022, Thm 2.1).
//
// A mechanism is a typed value that builds itself (Mechanism): each family
// is a type (DPSGD, Tree, FFT, MFSingle, MFKB, BandMF, Sqrt, BandedSqrt,
// BandedToeplitz, BLT, BISR, Stamped), one file each (mech_*.go), whose
// Build returns a dpcore.Strategy: the dense *Factorization, or the O(n)
// *toeplitz.Strategy of the Toeplitz families. Compare scores any
// mechanism from its strategy; names are parsed only by
// privacy.ParseMechanism. Optimized factorizations are kept in a Cache and
// saved and loaded by SaveFactorization and LoadFactorization.
//
// The packages below it:
//   - toeplitz: the Toeplitz encoders (square root, banded, BISR, BLT) in
//     O(n) memory and their optimizer;
//   - sensitivity: the sensitivity of a dense encoder under a schema;
//   - optimize: L-BFGS and fixed-point drivers with gonum-style Settings
//     and Result;
//   - internal/linalg and internal/guard: the dense linear algebra and the
//     size, memory and finiteness refusals every family shares.
//
// Optimize spends its time in Cholesky and LU factorizations, triangular
// solves and matrix products through gonum's process-wide BLAS. Call
// blas.Install (package github.com/dpmf-go/dpmf/blas) once in main to run
// them on its fast GEMM, as cmd/train does: several times faster than
// gonum's own at n = 2000.
package mfnoise
