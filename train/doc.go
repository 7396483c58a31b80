// Package train runs differentially private training end to end: it asks
// the planner (package privacy) for the privacy plan that binds a sampler, a
// correlated-noise mechanism and an accountant, checked before the first
// step, then runs the loop
// sample -> clipped per-example gradient sum -> add sigma*zeta*sens*W_i ->
// divide by the expected batch size -> optimizer step, with periodic
// evaluation, JSON-lines metrics and atomic, checksummed checkpoints from
// which a killed run resumes bit-identically.
//
// A step is all-or-nothing: sampler, noise, model and optimizer advance
// together or not at all, and a checkpoint is refused unless all four are
// at its step.
//
// Run is the one-call entry point; Trainer lets a service drive steps itself.
//
// The clipped per-example gradient sums come from an Engine: the planned
// executor (package clip) for Config.Model and the named models, or any
// Backend set as Config.Backend, e.g. a user's gorgonia graph through
// package gorgoniadp (docs/engines.md in the repository).
//
// For speed, call blas.Install (package github.com/dpmf-go/dpmf/blas) once
// from main before training: it replaces gonum's and gorgonia's matrix
// products, process-wide, with the project's assembly GEMM. The library does
// not do it for you because that setting is global to the process.
package train
