package train

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/privacy"
)

// UserEngine is an Engine that clips each user's combined gradient as
// one contribution (clip.Engine.UserClippedSum): a user-level run with more
// than one example a user needs it; with one, any Engine will do.
type UserEngine interface {
	UserClippedSum(x []float32, y []int, groups []int, opt clip.UserOptions, dst []float32) (clip.Stats, error)
}

var _ UserEngine = (*clip.Engine)(nil)

// userLevel is the trainer's side of a user-level run: the sampler draws
// users, and each sampled user's examples (at most k of them, chosen with
// secret randomness) enter the step as one clipped contribution.
type userLevel struct {
	users  *data.Users
	k      int
	mean   bool
	secret [32]byte // the choice of a user's k examples derives from it

	groups []int // examples of each sampled user, in batch order
}

// newUserLevel indexes the training set's owners. Without a seed the
// secret comes from crypto/rand.
func newUserLevel(cfg *Config) (*userLevel, error) {
	us, err := cfg.Train.Users()
	if err != nil {
		return nil, invalidf("user level: %v", err)
	}
	u := &userLevel{users: us, k: cfg.UserExamples, mean: cfg.UserMean}
	if s := deriveSeed(cfg.Seed, "users"); s != nil {
		u.secret = *s
	} else if _, err := rand.Read(u.secret[:]); err != nil {
		return nil, fmt.Errorf("train: seeding the per-user example choice: %w", err)
	}
	return u, nil
}

// bound is the plan's per-user bound.
func (u *userLevel) bound() *privacy.UserBound {
	return &privacy.UserBound{Examples: u.k, Mean: u.mean}
}

// expand turns the sampled users of a step into their examples: all of a
// user's examples when it has at most k, else k of them drawn without
// replacement by a generator keyed by the secret, the step and the user
// alone, so that which examples one user contributes does not depend on
// which other users are in the batch (removing or zeroing a user changes
// nothing else), and a retried or resumed step draws the same ones. It
// records each user's count in u.groups and appends the examples to
// dst[:0].
func (u *userLevel) expand(users []int, step int, dst []int) []int {
	dst, u.groups = dst[:0], u.groups[:0]
	for _, k := range users {
		ex := u.users.Of(k)
		if len(ex) <= u.k {
			dst = append(dst, ex...)
			u.groups = append(u.groups, len(ex))
			continue
		}
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:8], uint64(step))
		binary.LittleEndian.PutUint64(b[8:], uint64(k))
		s := sha256.Sum256(append(u.secret[:], b[:]...))
		rng := mrand.New(mrand.NewChaCha8(s))
		// A partial Fisher-Yates shuffle of the user's examples.
		lo := len(dst)
		dst = append(dst, ex...)
		pick := dst[lo:]
		for j := 0; j < u.k; j++ {
			r := j + rng.IntN(len(pick)-j)
			pick[j], pick[r] = pick[r], pick[j]
		}
		dst = dst[:lo+u.k]
		u.groups = append(u.groups, u.k)
	}
	return dst
}

// clipUsers leaves in t.sum the sum over the step's users (t.idx holds
// user indices) of each user's clipped gradient. Users never straddle a
// chunk: a user's examples are combined exactly before clipping.
func (t *Trainer) clipUsers(ctx context.Context, step int, sm *StepMetrics) error {
	u := t.users
	t.exIdx = u.expand(t.idx, step, t.exIdx)
	maxBatch := len(t.yb)
	var tl clip.Tally
	lo, g0 := 0, 0 // example and group at which the chunk starts
	for g0 < len(u.groups) {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi, g1 := lo, g0
		for g1 < len(u.groups) && hi+u.groups[g1] <= maxBatch+lo {
			hi += u.groups[g1]
			g1++
		}
		x, y, err := t.gather(t.exIdx[lo:hi], step)
		if err != nil {
			return err
		}
		var st clip.Stats
		if u.k == 1 {
			// One example per user: per-example clipping is per-user
			// clipping.
			st, err = t.engine.ClippedSumContext(ctx, x, y, t.chunk)
		} else {
			// New checked that the engine has it.
			st, err = t.engine.(UserEngine).UserClippedSum(x, y, u.groups[g0:g1], clip.UserOptions{Mean: u.mean}, t.chunk)
		}
		if err != nil {
			return err
		}
		t.adaptive.observe(st)
		for i, v := range t.chunk {
			t.sum[i] += v
		}
		tl.Add(st, hi-lo, g1-g0)
		lo, g0 = hi, g1
	}
	st := tl.Stats()
	sm.Loss, sm.ClippedFrac, sm.NonFinite, sm.NormQuantiles = st.Loss, st.Clipped, st.NonFinite, st.NormQuantiles
	return nil
}
