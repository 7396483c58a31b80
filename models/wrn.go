package models

import (
	"fmt"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/nn"
)

// NewWRN16x4 returns WideResNet-16-4 (Zagoruyko and Komodakis 2016) with
// GroupNorm in place of BatchNorm, the model of De et al. (2022,
// "Unlocking high-accuracy differentially private image classification
// through scale") for CIFAR-10: a 3x3 convolution to 16 channels, three
// groups of two pre-activation residual blocks (64, 128, 256 channels,
// strides 1, 2, 2; each block GroupNorm+ReLU, 3x3 convolution,
// GroupNorm+ReLU, 3x3 convolution), GroupNorm+ReLU, global average
// pooling and a dense layer. Where a block changes the shape its shortcut
// is a strided 1x1 convolution of the block's input. groups is the number
// of GroupNorm groups (De et al. use 16).
func NewWRN16x4(inputShape [3]int, classes, groups int, seed uint64) (Model, error) {
	if err := checkCommon(inputShape, classes); err != nil {
		return nil, fmt.Errorf("models: wrn16-4: %w", err)
	}
	if groups <= 0 || 16%groups != 0 {
		return nil, dpcore.Invalid("models", "wrn16-4: %d groups must divide 16 channels", groups)
	}
	b := NewBuilder("wrn16-4", inputShape, seed)
	b.Conv2D("stem", 16, 3, 1, 1, nn.Identity)
	for g, width := range []int{64, 128, 256} {
		for k := range 2 {
			stride := 1
			if g > 0 && k == 0 {
				stride = 2
			}
			name := fmt.Sprintf("group%d.block%d.", g+1, k+1)
			in := b.Shape()
			var shortcut func(*Builder)
			if stride != 1 || in.C != width {
				shortcut = func(s *Builder) { s.Conv2D(name+"shortcut", width, 1, stride, 0, nn.Identity) }
			}
			b.Residual(func(r *Builder) {
				r.GroupNormAct(name+"norm1", groups, nn.ReLU).
					Conv2D(name+"conv1", width, 3, stride, 1, nn.Identity).
					GroupNormAct(name+"norm2", groups, nn.ReLU).
					Conv2D(name+"conv2", width, 3, 1, 1, nn.Identity)
			}, shortcut)
		}
	}
	sh := b.Shape()
	if sh.H != sh.W {
		return nil, dpcore.Invalid("models", "wrn16-4: input %v gives a %dx%d final map; want a square input", inputShape, sh.H, sh.W)
	}
	return b.GroupNormAct("final.norm", groups, nn.ReLU).AvgPool(sh.H).Dense("classifier", classes, nn.Identity).Model()
}
