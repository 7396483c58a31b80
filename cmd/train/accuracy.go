package main

import (
	"flag"
	"github.com/dpmf-go/dpmf/privacy"
	"math"

	"github.com/dpmf-go/dpmf/train"
)

// accuracyFlags are the flags of issue 27's levers (train run, train
// audit): augmentation and its multiplicity, adaptive clipping.
type accuracyFlags struct {
	augment                 int
	quantile, qNoise, qRate float64
}

func (a *accuracyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&a.augment, "augment", 0, "augment K: random crop (pad 4) and horizontal flip of each training example, in K copies whose gradients are averaged before clipping (augmentation multiplicity, De et al. 2022; sensitivity unchanged); 1 is plain augmentation, 0 none; pixel models only")
	fs.Float64Var(&a.quantile, "clip-quantile", 0, "adaptive clipping (Andrew et al. 2021): the clip norm starts at -clip and tracks this quantile of the per-example gradient norms, estimated privately and accounted in the plan (0: a fixed clip norm)")
	fs.Float64Var(&a.qNoise, "clip-quantile-noise", 0, "-clip-quantile: noise std of the count released each step (default batch/20)")
	fs.Float64Var(&a.qRate, "clip-quantile-lr", 0, "-clip-quantile: rate of the geometric clip-norm update (default 0.2)")
}

// apply sets the Config's fields.
func (a *accuracyFlags) apply(cfg *train.Config) error {
	if a.augment < 0 {
		return usagef("-augment %d must not be negative (0: no augmentation, K: K augmented copies of each example)", a.augment)
	}
	if a.augment > 0 {
		cfg.Data.Augment = &train.Augmentation{Multiplicity: a.augment}
	}
	if a.quantile == 0 {
		if a.qNoise != 0 || a.qRate != 0 {
			return usagef("-clip-quantile-noise and -clip-quantile-lr apply with -clip-quantile only")
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"clip-quantile-noise", a.qNoise}, {"clip-quantile-lr", a.qRate}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return usagef("-%s %v: want a positive number (omit it for the default)", f.name, f.v)
		}
	}
	if !(a.quantile > 0 && a.quantile < 1) {
		return usagef("-clip-quantile %v: want a quantile in (0,1)", a.quantile)
	}
	cfg.Privacy.Quantile = &privacy.QuantileRelease{Target: a.quantile, NoiseStd: a.qNoise, LearningRate: a.qRate}
	return nil
}
