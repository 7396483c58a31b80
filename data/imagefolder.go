package data

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // registers JPEG for image.Decode
	_ "image/png"  // registers PNG for image.Decode
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// imageMaxSide bounds the width and height of one image, checked from its
// header before it is decoded (a small file can declare a huge image).
const imageMaxSide = 4096

// LoadImageFolder loads a directory of PNG and JPEG images with one
// subdirectory per class, as torchvision's ImageFolder reads it:
// dir/train/CLASS/*.png|jpg|jpeg and dir/test/CLASS/*. The classes are the
// sorted names of the training subdirectories, and the test split must
// use the same ones. Every image must have the size of the first; the
// examples are grey (one channel) when every image is grey, RGB otherwise,
// with pixels scaled to [0, 1] (a translucent image counts as if on black). Each image's size is
// read from its header and checked before it is decoded, and the total is
// bounded (2^28 features); an unreadable or mismatched image is an error
// wrapping ErrFormat that names the file.
func LoadImageFolder(dir string) (train, test *Dataset, err error) {
	classes, err := imageClasses(filepath.Join(dir, "train"))
	if err != nil {
		return nil, nil, err
	}
	trainFiles, err := imageFiles(filepath.Join(dir, "train"), classes)
	if err != nil {
		return nil, nil, err
	}
	testFiles, err := imageFiles(filepath.Join(dir, "test"), classes)
	if err != nil {
		return nil, nil, err
	}
	all := append(slices.Clone(trainFiles), testFiles...)
	if len(trainFiles) == 0 || len(testFiles) == 0 {
		return nil, nil, formatf("images: %s: want images in train/CLASS and test/CLASS", dir)
	}
	// The size and colour of every image, from the headers alone.
	var size image.Point
	grey := true
	for i, f := range all {
		cfg, err := imageConfig(f.path)
		if err != nil {
			return nil, nil, err
		}
		p := image.Pt(cfg.Width, cfg.Height)
		if i == 0 {
			size = p
		} else if p != size {
			return nil, nil, formatf("images: %s is %dx%d, %s %dx%d: all images must have one size", f.path, p.X, p.Y, all[0].path, size.X, size.Y)
		}
		grey = grey && (cfg.ColorModel == color.GrayModel || cfg.ColorModel == color.Gray16Model)
	}
	s := Shape{C: 3, H: size.Y, W: size.X}
	if grey {
		s.C = 1
	}
	if !s.valid() || len(all) > (1<<28)/s.Size() {
		return nil, nil, formatf("images: %d images of %v: more than 2^28 features", len(all), s)
	}
	load := func(files []imageFile, split string) (*Dataset, error) {
		x := make([]float32, len(files)*s.Size())
		y := make([]int, len(files))
		for i, f := range files {
			if err := decodeImage(f.path, s, x[i*s.Size():(i+1)*s.Size()]); err != nil {
				return nil, err
			}
			y[i] = f.class
		}
		d, err := NewDataset(x, y, s, len(classes))
		if err != nil {
			return nil, err
		}
		d.Name = "images " + filepath.Join(dir, split)
		return d, nil
	}
	if train, err = load(trainFiles, "train"); err != nil {
		return nil, nil, err
	}
	if test, err = load(testFiles, "test"); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

type imageFile struct {
	path  string
	class int
}

// imageClasses returns the sorted names of dir's subdirectories.
func imageClasses(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: images: %w", err)
	}
	var classes []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			classes = append(classes, e.Name())
		}
	}
	if len(classes) == 0 {
		return nil, formatf("images: %s has no class subdirectories", dir)
	}
	return classes, nil // os.ReadDir sorts by name
}

// imageFiles lists the images of each class subdirectory of dir, in name
// order; a subdirectory that is not a training class is an error.
func imageFiles(dir string, classes []string) ([]imageFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data: images: %w", err)
	}
	var out []imageFile
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		c := slices.Index(classes, e.Name())
		if c < 0 {
			return nil, formatf("images: %s: class %q is not one of the training classes %v", dir, e.Name(), classes)
		}
		files, err := os.ReadDir(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("data: images: %w", err)
		}
		for _, f := range files {
			switch strings.ToLower(filepath.Ext(f.Name())) {
			case ".png", ".jpg", ".jpeg":
				if f.Type().IsRegular() {
					out = append(out, imageFile{filepath.Join(dir, e.Name(), f.Name()), c})
				}
			}
		}
	}
	return out, nil
}

func imageConfig(path string) (image.Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return image.Config{}, fmt.Errorf("data: images: %w", err)
	}
	defer f.Close()
	cfg, _, err := image.DecodeConfig(f)
	if err != nil {
		return image.Config{}, formatf("images: %s: %v", path, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || cfg.Width > imageMaxSide || cfg.Height > imageMaxSide {
		return image.Config{}, formatf("images: %s is %dx%d: want 1 to %d pixels a side", path, cfg.Width, cfg.Height, imageMaxSide)
	}
	return cfg, nil
}

// decodeImage decodes path into dst in CHW order (s.C is 1: grey, 3: RGB).
func decodeImage(path string, s Shape, dst []float32) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data: images: %w", err)
	}
	defer f.Close()
	img, _, err := image.Decode(f)
	if err != nil {
		return formatf("images: %s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != s.W || b.Dy() != s.H {
		return formatf("images: %s decodes to %dx%d, its header said %dx%d", path, b.Dx(), b.Dy(), s.W, s.H)
	}
	plane := s.H * s.W
	for y := 0; y < s.H; y++ {
		for x := 0; x < s.W; x++ {
			i := y*s.W + x
			c := img.At(b.Min.X+x, b.Min.Y+y)
			if s.C == 1 {
				g := color.Gray16Model.Convert(c).(color.Gray16)
				dst[i] = float32(g.Y) / 0xffff
				continue
			}
			r, g, bl, _ := c.RGBA()
			dst[i], dst[plane+i], dst[2*plane+i] = float32(r)/0xffff, float32(g)/0xffff, float32(bl)/0xffff
		}
	}
	return nil
}
