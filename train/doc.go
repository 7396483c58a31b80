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
// # Configuration
//
// Config is grouped by concern: Data, Model, Privacy (the privacy.Request
// the planner takes, handed to it as it is), Optimizer, Output and Memory.
// Each optional feature is one typed pointer, nil when off, in its own
// file, owning its validation, its settings in the checkpoint and its
// state: Data.Augment (augmult.go), Privacy.UserBound (users.go),
// Privacy.Quantile (adaptive.go), Optimizer.Warmup (warmup.go) and
// Optimizer.EMA (ema.go).
//
// # The step and its hooks
//
// TrainStep (trainer.go) calls the private features at fixed points, in
// the order docs/math.md (section 9) fixes: after the batch is drawn
// (the audit's canaries leave it; adaptive clipping starts its count),
// for each clipped sum (clipsum.go; users.go and augmult.go compute theirs),
// before and after the noise (the audit's white-box observer), and after
// the update (adaptive clipping moves its clip norm). Non-private work
// attaches as a Hook after the update: the parameter average, the
// metrics record, Run's evaluations and checkpoints (hooks.go), and a
// caller's Config.Hooks. New builds the pieces (build.go).
//
// The clipped per-example gradient sums come from an Engine: the planned
// executor (package clip) for a models.Model and the named models, or any
// Backend set as Config.Model.Backend, e.g. a user's gorgonia graph through
// package gorgoniadp (docs/engines.md in the repository).
//
// For speed, call blas.Install (package github.com/dpmf-go/dpmf/blas) once
// from main before training: it replaces gonum's and gorgonia's matrix
// products, process-wide, with the project's assembly GEMM. The library does
// not do it for you because that setting is global to the process.
package train
