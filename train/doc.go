// Package train runs differentially private training end to end: it binds a
// sampler, a correlated-noise mechanism, an optimizer and an accountant into
// one privacy plan that is checked before the first step, then runs the loop
// sample -> clipped per-example gradient sum -> add sigma*zeta*sens*W_i ->
// divide by the expected batch size -> optimizer step, with periodic
// evaluation, JSON-lines metrics and atomic, checksummed checkpoints from
// which a killed run resumes bit-identically.
//
// Run is the one-call entry point; Trainer lets a service drive steps itself.
//
// For speed, call blas.Install (package github.com/dpmf-go/dpmf/blas) once
// from main before training: it replaces gonum's and gorgonia's matrix
// products, process-wide, with the project's assembly GEMM. The library does
// not do it for you because that setting is global to the process.
package train
