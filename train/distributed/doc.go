// Package distributed trains across worker processes with one noise owner,
// as federated DP-FTRL runs it (Kairouz et al. 2021): W workers each hold
// a shard of the training data and compute clipped gradient sums; one
// coordinator samples the batch, adds the mechanism's noise once per step
// and applies the update.
//
// The coordinator is an ordinary training run (train.Run) whose engine is
// an IndexEngine: the loop samples with the run's own sampler, hands the
// sampled example indices to the engine, and the engine sends each worker
// the indices of its shard together with the current parameters over NATS
// request/reply, waits for every worker's clipped sum, and adds the sums
// in shard order. Noise, the division by the expected batch size, the
// optimizer, the plan, the ledger and the checkpoints are the trainer's,
// so the plan is the single-process plan for the same settings, and one
// worker reproduces a single-process run bit for bit.
//
// Sampling stays with the coordinator, which owns the noise and the run's
// secret seed anyway: it then draws exactly the batch a single process
// draws (Poisson, band, shuffle or fixed order, with the realized
// participation checks of the sampler), and a worker learns only which of
// its own examples a step sampled, as a worker-side sampler keyed by
// example id would. The indices are O(B/W) integers a step next to the d
// floats of the sum.
//
// A step is all-or-nothing across workers: a request carries the step,
// a fresh nonce, the parameters and the shard digest; the coordinator uses
// a step's sums only when all W replies for that request arrived, and a
// worker's computation is a pure function of the request, so a lost
// request is simply asked again (Options.RequestTimeout) and a restarted
// worker answers it. A worker that stays away longer than Options.Wait
// stops the run cleanly: train.Run rolls the step back, saves the
// checkpoint (Output.CheckpointPath) at the last complete step and
// returns an error wrapping both ErrWorkerLost and train.ErrInterrupted;
// the same run started again resumes from it.
//
// No step log is kept in JetStream: a step's messages are recomputable
// from the parameters and the sampler state, both in the coordinator's
// checkpoint, so a durable log would add a replicated write a step and
// give nothing the checkpoint does not. The clipped sums are derived from
// private data without noise, and so is the shard digest each request
// carries (a SHA-256 of the shard, for the worker that holds it): the
// workers and the NATS servers are trusted as the coordinator is, the
// connection must be authenticated and, off loopback, encrypted
// (cmd/train refuses a connection without credentials).
package distributed
