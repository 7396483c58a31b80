// Package replica runs a private continual-release aggregate (package
// aggregate) on a NATS JetStream cluster, so that the service survives the
// loss of a machine: any number of stateless front-ends, and one
// aggregator at a time, elected by a lease, that runs the single-node
// engine on a local cache of a replicated log. A Node is both: its Add,
// Commit, Release, Ledger and Dim answer as an *aggregate.Aggregator does
// (cmd/dpserve serves either behind one HTTP handler), and its
// RunAggregator stands for the lease.
//
//   - Front-ends validate a contribution (aggregate.CheckContribution, the
//     aggregator's own rule), publish it to the log stream <Service>_LOG
//     with Nats-Msg-Id de-duplication (the contributor id plus the
//     request's idempotency key, WithIdempotencyKey, or a random id) and
//     acknowledge only after JetStream confirmed it (stored on a majority
//     of the stream's replicas).
//   - One aggregator at a time holds the lease key "leader" of the KV
//     bucket <Service>_lease (TTL Config.LeaseTTL, renewed by Update with
//     the expected revision). It runs the single-node engine
//     (aggregate.Aggregator) on a local cache file, applying the log in
//     order: the bounding rules, the clip and the exact arithmetic are
//     those of the single-node mode, code and all.
//   - A commit is a log entry too. The aggregator commits, writes a
//     snapshot of its engine (noise state, open step, participation
//     records) to the object store <Service>_snap, then creates the key
//     rel.<t> of the KV bucket <Service>_state holding release t, the log
//     position it covers and the snapshot's name. Create fails if the key
//     exists: two aggregators can never write two releases for one step,
//     and an aggregator that finds the key taken stops and restarts from
//     the stored state.
//   - A standby keeps an engine restored from the last release record's
//     snapshot and applied to the log's contributions after the position
//     it covers (up to the next commit), and takes the lease as soon as
//     it is deleted (a clean stop) or expired (a crash): it continues
//     with the noise state stored with the last release, never drawing a
//     step's noise again for publication nor reusing it.
//   - While it applies the log the leader publishes a heartbeat (an
//     empty decision batch); a front-end that hears none answers a
//     logged contribution at once (*LoggedError) instead of waiting for a
//     decision.
//   - Every read of <Service>_state goes to its stream's leader
//     (stateGet), so it sees every write acknowledged before it.
//
// The log holds the raw contributions and the snapshots the noise state,
// which predicts future noise: the connection a Node is given must
// authenticate to the servers and, off loopback, be encrypted (cmd/dpserve
// refuses one that does not). docs/dpserve.md describes the service, its
// failover times and why a short lease is safe.
package replica
