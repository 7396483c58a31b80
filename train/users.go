package train

import (
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

// maxUserExamples bounds privacy.UserBound.Examples.
const maxUserExamples = 1 << 16

// userDefaults is a copy of b with its defaults (one example a user a
// step), or nil.
func userDefaults(b *privacy.UserBound) *privacy.UserBound {
	if b == nil {
		return nil
	}
	d := *b
	if d.Examples == 0 {
		d.Examples = 1
	}
	return &d
}

// newUserLevel indexes the training set's owners, or is nil for an
// example-level run. Without a seed the secret comes from crypto/rand.
func newUserLevel(train *data.Dataset, b *privacy.UserBound, batch int, secret [32]byte) (*userLevel, error) {
	if b == nil {
		return nil, nil
	}
	us, err := train.Users()
	if err != nil {
		return nil, invalidf("user level: %v", err)
	}
	if batch > us.Len() {
		return nil, invalidf("batch = %d users must lie in [1, %d users]", batch, us.Len())
	}
	return &userLevel{users: us, k: b.Examples, mean: b.Mean, secret: secret}, nil
}

// userSettings is the checkpoint's record of the unit of privacy,
// recorded only at user level, so example-level checkpoints keep their
// settings.
func userSettings(b *privacy.UserBound) []setting {
	if b == nil {
		return nil
	}
	return []setting{{"unit of privacy", fmt.Sprintf("user (at most %d examples a step, mean %v)", b.Examples, b.Mean)}}
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

// checkUsers refuses what user-level privacy (the run's
// Privacy.UserBound b) cannot do.
func checkUsers(b *privacy.UserBound, r runFacts) error {
	bad := invalidf
	switch {
	case b == nil:
		return bad("user level: the unit of privacy is the user, but Privacy.UserBound (the examples of a user a step) is not set")
	case r.nonPrivate:
		return bad("user level is a unit of privacy: a non-private run has none")
	case r.train.Owners == nil:
		return bad("user level: the training data %q has no owner ids (a CSV user column, data.Dataset.SetOwners or a synthetic assignment)", r.train.Name)
	case b.Examples < 1 || b.Examples > maxUserExamples:
		return bad("user examples %d: want 1 to %d examples per user per step", b.Examples, maxUserExamples)
	case r.perLayer:
		return bad("user level clips each user's gradient as a whole: per-layer clipping is not supported")
	case r.batch <= 0:
		return bad("batch = %d users must be positive", r.batch)
	}
	return nil
}
