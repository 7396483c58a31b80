// Package optim holds the first-order optimizers of private training and the
// workload each one applies to the gradient stream.
//
// A correlated-noise mechanism is factorized for a workload A (SPEC 2): the
// lower-triangular map from the gradient stream G (rows g_1..g_n) to the
// models, theta_i = theta_0 - (A G)_i. The optimizers here are written so
// that this identity holds exactly for the workload they report:
//
//   - SGD with learning rates eta_i: A = M_eta (the prefix sum S when every
//     rate is 1), reported as dpcore.PrefixSum or dpcore.MomentumWorkload
//     with beta = 0.
//   - Heavy-ball momentum (Denisov et al. 2022, Prop. 4.2):
//     m_i = beta m_{i-1} + g_i, theta_i = theta_{i-1} - eta_i m_i, so
//     A = M_eta M_beta, reported as dpcore.MomentumWorkload.
//   - Nesterov momentum and decoupled weight decay keep theta linear in G,
//     but their A is not one of the mfnoise workload families; Matrix gives
//     it exactly and Workload returns ErrUnsupportedWorkload.
//   - Adam and AdamW are not linear in G. They are still private (they
//     post-process the privatized gradients), but no workload describes
//     them; the mechanism should then be factorized for the prefix sum, which
//     releases the privatized running sums the optimizer reads.
//
// Learning-rate schedules are dpcore.Schedule values, fixed before training
// so the workload is data independent. Every optimizer saves and restores its
// complete state with MarshalBinary/UnmarshalBinary; a restored optimizer
// continues bit-identically.
//
// Steps take float32 tensors (Step); the float64 path (Step64) exists for
// exactness checks against the dense workload. One optimizer runs in one
// precision for its whole life.
package optim
