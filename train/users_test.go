package train

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/privacy"
)

// ownedSynthetic is a random dataset whose examples are dealt to users with
// skewed counts.
func ownedSynthetic(t *testing.T, n, users int, seed uint64) *data.Dataset {
	t.Helper()
	tr, _, err := data.Synthetic(n, 1, data.Shape{C: 1, H: 3, W: 3}, 3, 1, seed)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := data.DealOwners(n, users, 1, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetOwners(owners); err != nil {
		t.Fatal(err)
	}
	return tr
}

func norm64(a, b []float32) float64 {
	s := 0.0
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return math.Sqrt(s)
}

// TestUserContributionBound is the property of user-level training: for
// random datasets with owners, every sampler over users, one or several
// examples per user, sum or mean, and any single user of a step, removing
// (equivalently, under zero-out, zeroing) all of that user's examples
// changes the step's clipped sum by at most zeta; and no user ever has
// more than k examples in a step. The clip norm is small, so every
// example's gradient is clipped: per-example clipping of a user's k
// examples would move the sum by up to k*zeta and fail (seen failing with
// UserClippedSum replaced by ClippedSum).
func TestUserContributionBound(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		sampling privacy.Sampling
		mech     privacy.Mechanism
	}{
		{privacy.SamplingPoisson, mfnoise.DPSGD{}},
		{privacy.SamplingBandPoisson, mfnoise.BandMF{Bands: 2}},
		{privacy.SamplingFixedOrder, mfnoise.DPSGD{}},
		{privacy.SamplingShuffle, mfnoise.DPSGD{}},
	}
	for trial := range 3 {
		for _, c := range cases {
			for _, k := range []int{1, 4} {
				for _, mean := range []bool{false, true} {
					if k == 1 && mean {
						continue
					}
					name := fmt.Sprintf("trial%d/%s/k%d/mean%v", trial, c.sampling, k, mean)
					t.Run(name, func(t *testing.T) {
						seed := uint64(100*trial + k)
						ds := ownedSynthetic(t, 300+50*trial, 40+10*trial, seed)
						const zeta = 0.01
						tr, err := New(ctx, Config{
							Data:    Data{Train: ds},
							Model:   ModelSpec{Name: "mlp", Hidden: []int{5}},
							Privacy: privacy.Request{Steps: 6, Batch: 10, Mechanism: c.mech, Sampling: c.sampling, NoiseMultiplier: 1, ClipNorm: zeta, Seed: []byte(name), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: k, Mean: mean}},
						})
						if err != nil {
							t.Fatal(err)
						}
						if tr.Plan().Unit != privacy.UnitUser || tr.sampler.Examples() != tr.users.users.Len() {
							t.Fatalf("plan unit %s, sampler over %d, want user over %d users", tr.Plan().Unit, tr.sampler.Examples(), tr.users.users.Len())
						}
						worst, checked := 0.0, 0
						for step := 1; step <= 3; step++ {
							if _, err := tr.sampleAndClip(ctx); err != nil {
								t.Fatal(err)
							}
							full := slices.Clone(tr.sum)
							users := slices.Clone(tr.idx)
							for _, g := range tr.users.groups {
								if g > k {
									t.Fatalf("step %d: a user has %d examples in the step, bound %d", step, g, k)
								}
							}
							for j := range users {
								tr.idx = slices.Delete(slices.Clone(users), j, j+1)
								clear(tr.sum)
								var sm StepMetrics
								sm.BatchSize = len(tr.idx)
								if err := tr.clipUsers(ctx, step, &sm); err != nil {
									t.Fatal(err)
								}
								d := norm64(full, tr.sum)
								worst = max(worst, d)
								checked++
								// The sums differ by the user's contribution
								// (norm <= zeta exactly) plus the float32
								// rounding of adding it among the others.
								if d > zeta*(1+1e-5) {
									t.Fatalf("step %d: removing user %d moved the clipped sum by %.9g > zeta = %g", step, users[j], d, zeta)
								}
							}
						}
						if checked == 0 || worst < zeta/2 {
							t.Fatalf("checked %d users, largest change %g: the test did not exercise clipped users", checked, worst)
						}
					})
				}
			}
		}
	}
}

// A user-level run stopped at a checkpoint and resumed ends with the same
// parameters, bit for bit, as the run done at once: the per-user example
// choice is keyed by step and user, not by the process. The checkpoint of
// a user-level run does not resume an example-level one.
func TestUserLevelResumeIsBitIdentical(t *testing.T) {
	ctx := context.Background()
	ds := ownedSynthetic(t, 400, 60, 5)
	cfg := Config{
		Data:      Data{Train: ds},
		Model:     ModelSpec{Name: "mlp", Hidden: []int{6}},
		Privacy:   privacy.Request{Steps: 8, Batch: 12, Mechanism: mfnoise.BandMF{Bands: 2}, NoiseMultiplier: 1, ClipNorm: 0.5, Seed: []byte("user-level resume test"), InsecureSeed: true, UserBound: &privacy.UserBound{Examples: 3}},
		Optimizer: Optimizer{Momentum: 0.9, LearningRate: 0.1},
		Output:    Output{EvalEvery: 100},
	}
	whole, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for !whole.Done() {
		if _, err := whole.TrainStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	path := t.TempDir() + "/ckpt"
	part, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := part.TrainStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := part.SaveCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	resumed := cfg
	resumed.Output.CheckpointPath = path
	rest, err := New(ctx, resumed)
	if err != nil {
		t.Fatal(err)
	}
	if rest.Step() != 3 {
		t.Fatalf("resumed at step %d, want 3", rest.Step())
	}
	for !rest.Done() {
		if _, err := rest.TrainStep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(whole.Model().Params(), rest.Model().Params()) {
		t.Fatal("resumed user-level run differs from the run done at once")
	}
	exLevel := resumed
	exLevel.Privacy.UserBound = nil
	if _, err := New(ctx, exLevel); err == nil {
		t.Fatal("an example-level run resumed a user-level checkpoint")
	}
}

// Configurations that would claim user-level privacy without owners or
// without the per-user bound are refused.
func TestUserLevelConfigRefused(t *testing.T) {
	ctx := context.Background()
	owned := ownedSynthetic(t, 100, 10, 1)
	plain, _, err := data.Synthetic(100, 1, data.Shape{C: 1, H: 3, W: 3}, 3, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	base := Config{Data: Data{Train: owned}, Model: ModelSpec{Name: "logistic"}, Privacy: privacy.Request{Steps: 2, Batch: 5, NoiseMultiplier: 1, UserBound: &privacy.UserBound{}}}
	for name, edit := range map[string]func(*Config){
		"no owners":         func(c *Config) { c.Data.Train = plain },
		"k < 1":             func(c *Config) { c.Privacy.UserBound = &privacy.UserBound{Examples: -1} },
		"non-private":       func(c *Config) { c.NonPrivate = true },
		"per-layer":         func(c *Config) { c.Model.ClipPerLayer = []float64{1} },
		"more users a step": func(c *Config) { c.Privacy.Batch = 11 },
		"user unit without a bound": func(c *Config) {
			c.Privacy.UserBound = nil
			c.Privacy.Unit = privacy.UnitUser
		},
	} {
		cfg := base
		edit(&cfg)
		if _, err := New(ctx, cfg); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: %v, want dpcore.ErrInvalid", name, err)
		}
	}
	if _, err := New(ctx, base); err != nil {
		t.Fatal(err)
	}
}

// An example-level run over data with owners says in its claim what it
// means per owner: group privacy over the largest owner's examples.
func TestExampleLevelOverOwnedDataStatesGroupPrivacy(t *testing.T) {
	ds := ownedSynthetic(t, 200, 20, 2)
	us, err := ds.Users()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := New(context.Background(), Config{Data: Data{Train: ds}, Model: ModelSpec{Name: "logistic"}, Privacy: privacy.Request{Steps: 2, Batch: 10, NoiseMultiplier: 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("owners holding up to %d examples", us.MaxExamples())
	if p := tr.Plan(); p.Unit != privacy.UnitExample || !strings.Contains(strings.Join(p.Assumptions(), "\n"), want) {
		t.Fatalf("example-level plan over owned data: unit %s, assumptions do not contain %q:\n%s", p.Unit, want, p)
	}
}

// hidingBackend's engines lack UserClippedSum, as a backend without
// per-user combination would.
type hidingBackend struct{ nnBackend }

func (b hidingBackend) NewEngine(opt clip.Options) (Engine, error) {
	e, err := b.nnBackend.NewEngine(opt)
	return struct{ Engine }{e}, err
}

// A backend whose engine cannot combine a user's examples before clipping
// is refused at user level with more than one example a user, and runs
// with one (per-example clipping is then per-user clipping).
func TestUserLevelNeedsUserEngine(t *testing.T) {
	ctx := context.Background()
	ds := ownedSynthetic(t, 100, 10, 1)
	m, err := models.NewLogistic([3]int{1, 3, 3}, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Data: Data{Train: ds}, Model: ModelSpec{Backend: hidingBackend{nnBackend{m}}}, Privacy: privacy.Request{Steps: 2, Batch: 5, NoiseMultiplier: 1, UserBound: &privacy.UserBound{Examples: 2}}}
	if _, err := New(ctx, cfg); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "UserEngine") {
		t.Fatalf("k = 2 on an engine without UserClippedSum: %v", err)
	}
	cfg.Privacy.UserBound = &privacy.UserBound{Examples: 1}
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.TrainStep(ctx); err != nil {
		t.Fatal(err)
	}
}
