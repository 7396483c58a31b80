// Package noise generates the gradient-space noise of a matrix-factorization
// mechanism one training step at a time: for a factorization A = B C made by
// package mfnoise, the mechanism releases B (C X + Z), and training adds
// W = A^-1 B Z (C^-1 Z for a square lower-triangular encoder) to the
// clipped gradients and lets the optimizer apply A (SPEC 6 of
// docs/math.md).
//
// A Source streams W_1, W_2, ... checkpointably (MarshalBinary holds
// the complete state) in the memory the mechanism needs: nothing for
// DP-SGD, b-1 rows for a b-banded encoder, O(log n) rows for a binary tree
// with an online decoder, Nbuf rows for a buffered linear Toeplitz (BLT)
// encoder, and within Options.MemoryBudget by regenerating noise rows
// when the fastest method does not fit. Every method draws the same
// Gaussian rows z_j from the seed (see Options), so they agree to
// rounding and a source can be rebuilt and resumed from a checkpoint.
//
// Package mfnoise owns the mechanisms (workloads, encoders and decoders,
// sensitivity, optimizers); this package only reads their structure
// (Factorization, Toeplitz) and does not feed anything back.
package noise
