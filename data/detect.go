package data

import "fmt"

// MismatchError is the error of LoadNamed for a directory that holds
// another dataset than the one named: CIFAR-100 where CIFAR-10 was asked
// for, IDX files where CIFAR was, or Fashion-MNIST where MNIST was (and
// the reverse; the two share one file format and shape and are told apart
// by their pixels, see DetectIDXContent). It matches ErrFormat.
type MismatchError struct {
	Name  string // the dataset asked for: NameMNIST, NameCIFAR10, ...
	Dir   string
	Found string // what dir holds, for people, e.g. "Fashion-MNIST (its pixel statistics ...)"
	// FoundName is the LoadNamed name of what dir holds ("" if it is
	// none of them, or several could be).
	FoundName string
}

func (e *MismatchError) Error() string { return "data: " + e.Name + ": " + e.Reason() }

// Reason is what is wrong, without the package and the name asked for:
// "DIR holds FOUND, not NAME".
func (e *MismatchError) Reason() string {
	return fmt.Sprintf("%s holds %s, not %s", e.Dir, e.Found, displayName(e.Name))
}

// Is makes errors.Is(err, ErrFormat) hold.
func (e *MismatchError) Is(target error) bool { return target == ErrFormat }

func displayName(name string) string {
	switch name {
	case NameMNIST:
		return "MNIST"
	case NameFashionMNIST:
		return "Fashion-MNIST"
	case NameCIFAR10:
		return "CIFAR-10"
	case NameCIFAR100:
		return "CIFAR-100"
	}
	return name
}

// Pixel statistics of the two IDX datasets of 28 x 28 grey images, over
// their official training files: handwritten digits are thin strokes on
// an empty background, clothes fill most of the frame.
//
//	              exactly-zero pixels   mean intensity (0..1)
//	MNIST                ~81%                0.1307
//	Fashion-MNIST        50.2%               0.2860
//
// (MNIST's mean is the well-known normalization constant 0.1307;
// Fashion-MNIST's were measured on Debian's dataset-fashion-mnist, and the
// embedded subset gives 50.2% and 0.287.) Even Fashion-MNIST's sparsest
// class, sandals, has only 68% zero pixels. The windows below leave wide
// margins on both sides; a set outside both (random bytes, another
// dataset, a small or one-class subset) is not judged.
const (
	mnistZeroMin, mnistZeroMax     = 0.74, 0.92
	mnistMeanMin, mnistMeanMax     = 0.06, 0.19
	fashionZeroMin, fashionZeroMax = 0.35, 0.62
	fashionMeanMin, fashionMeanMax = 0.21, 0.40
	// minJudged is the fewest images whose statistics are judged.
	minJudged = 500
)

// IDXContent is what DetectIDXContent found in a set of 28 x 28 images.
// ZeroFrac and Mean (and String, which prints them) are exact statistics
// of the images: of a private set, they are not private (see
// DetectIDXContent).
type IDXContent struct {
	// Name is NameMNIST, NameFashionMNIST, or "" when the statistics fit
	// neither (or there are too few images to tell).
	Name string
	// ZeroFrac is the fraction of pixels exactly 0, Mean the mean
	// intensity in [0,1].
	ZeroFrac, Mean float64
	Images         int
}

func (c IDXContent) String() string {
	return fmt.Sprintf("%.1f%% of pixels exactly zero, mean intensity %.3f over %d images", 100*c.ZeroFrac, c.Mean, c.Images)
}

// DetectIDXContent tells MNIST from Fashion-MNIST by the pixel statistics
// of the given sets (1 x 28 x 28 images scaled to [0,1]), taken together.
//
// Not private: the statistics it returns are exact functions of every
// image, not covered by any privacy guarantee (each image moves them).
// Use Name, which only says which side of wide fixed windows they fall
// on; do not print or publish ZeroFrac and Mean of a private set. (The
// errors of LoadNamed state the published figures, not the measured ones.)
func DetectIDXContent(sets ...*Dataset) IDXContent {
	var zeros, n int
	var sum float64
	var c IDXContent
	for _, d := range sets {
		if d == nil || d.Shape != (Shape{C: 1, H: 28, W: 28}) {
			return c
		}
		for _, v := range d.X {
			if v == 0 {
				zeros++
			}
			sum += float64(v)
		}
		n += len(d.X)
		c.Images += d.Len()
	}
	if n == 0 {
		return c
	}
	c.ZeroFrac, c.Mean = float64(zeros)/float64(n), sum/float64(n)
	switch {
	case c.Images < minJudged:
	case c.ZeroFrac >= mnistZeroMin && c.ZeroFrac <= mnistZeroMax && c.Mean >= mnistMeanMin && c.Mean <= mnistMeanMax:
		c.Name = NameMNIST
	case c.ZeroFrac >= fashionZeroMin && c.ZeroFrac <= fashionZeroMax && c.Mean >= fashionMeanMin && c.Mean <= fashionMeanMax:
		c.Name = NameFashionMNIST
	}
	return c
}

// checkIDXContent refuses train and test loaded as name (NameMNIST or
// NameFashionMNIST) from dir when their pixels are clearly the other
// dataset's.
func checkIDXContent(name, dir string, train, test *Dataset) error {
	c := DetectIDXContent(train, test)
	if c.Name == "" || c.Name == name {
		return nil
	}
	// The published figures of what was found and of what was asked
	// for, never the measured ones: those are exact statistics of the
	// (possibly private) images.
	return &MismatchError{Name: name, Dir: dir, FoundName: c.Name,
		Found: fmt.Sprintf("%s (its pixel statistics fall in %s's range, %s, far from %s's, %s)",
			displayName(c.Name), displayName(c.Name), typicalIDX(c.Name), displayName(name), typicalIDX(name))}
}

// typicalIDX states the published pixel statistics of the IDX dataset
// name (NameMNIST or NameFashionMNIST), for messages.
func typicalIDX(name string) string {
	if name == NameMNIST {
		return "about 81% of pixels exactly zero and mean intensity 0.13"
	}
	return "about 50% of pixels exactly zero and mean intensity 0.29"
}
