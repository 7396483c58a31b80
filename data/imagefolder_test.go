package data

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writePNG(t *testing.T, path string, img image.Image) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadImageFolder: classes are the sorted training subdirectories;
// grey images give one channel, any colour image three, laid out CHW and
// scaled to [0, 1]; an image of another size, a test class unknown to
// training and an image declaring 10^4 x 10^4 pixels are refused naming
// the file, the last before it is decoded.
func TestLoadImageFolder(t *testing.T) {
	dir := t.TempDir()
	grey := func(v uint8) image.Image {
		g := image.NewGray(image.Rect(0, 0, 3, 2))
		for i := range g.Pix {
			g.Pix[i] = v
		}
		g.Pix[1] = 255 // pixel (1, 0)
		return g
	}
	writePNG(t, filepath.Join(dir, "train", "cat", "a.png"), grey(0))
	writePNG(t, filepath.Join(dir, "train", "dog", "b.png"), grey(51))
	writePNG(t, filepath.Join(dir, "test", "dog", "c.png"), grey(102))
	tr, te, err := LoadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Shape != (Shape{C: 1, H: 2, W: 3}) || tr.Classes != 2 || tr.Len() != 2 || te.Len() != 1 || tr.Y[0] != 0 || tr.Y[1] != 1 || te.Y[0] != 1 {
		t.Fatalf("shape %v, classes %d, labels %v %v", tr.Shape, tr.Classes, tr.Y, te.Y)
	}
	if ex := tr.Example(1); ex[0] != 0.2 || ex[1] != 1 {
		t.Fatalf("example 1 = %v, want 0.2 then 1", ex)
	}
	// One colour image makes every example RGB.
	rgb := image.NewRGBA(image.Rect(0, 0, 3, 2))
	for i := 0; i < 6; i++ {
		rgb.Set(i%3, i/3, color.RGBA{R: 255, G: 0, B: 51, A: 255})
	}
	writePNG(t, filepath.Join(dir, "train", "dog", "d.png"), rgb)
	tr, _, err = LoadImageFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ex := tr.Example(2); tr.Shape.C != 3 || ex[0] != 1 || ex[6] != 0 || ex[12] != 0.2 {
		t.Fatalf("RGB: shape %v, example %v", tr.Shape, ex)
	}
	for _, c := range []struct {
		name string
		make func(d string)
		want string
	}{
		{"size", func(d string) {
			writePNG(t, filepath.Join(d, "train", "cat", "z.png"), image.NewGray(image.Rect(0, 0, 4, 4)))
		}, "all images must have one size"},
		{"class", func(d string) { writePNG(t, filepath.Join(d, "test", "cow", "z.png"), grey(1)) }, `class "cow" is not one of the training classes`},
		{"huge", func(d string) {
			var b bytes.Buffer
			png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1)))
			raw := b.Bytes()
			// Width and height are the first fields of IHDR, at byte 16.
			copy(raw[16:24], []byte{0, 0, 0x27, 0x10, 0, 0, 0x27, 0x10})
			binary.BigEndian.PutUint32(raw[29:33], crc32.ChecksumIEEE(raw[12:29]))
			os.WriteFile(filepath.Join(d, "train", "cat", "z.png"), raw, 0o644)
		}, "10000x10000: want 1 to 4096"},
		{"text", func(d string) { os.WriteFile(filepath.Join(d, "train", "cat", "z.png"), []byte("not an image"), 0o644) }, "z.png"},
	} {
		d := t.TempDir()
		writePNG(t, filepath.Join(d, "train", "cat", "a.png"), grey(0))
		writePNG(t, filepath.Join(d, "test", "cat", "a.png"), grey(0))
		c.make(d)
		_, _, err := LoadImageFolder(d)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrFormat saying %q", c.name, err, c.want)
		}
	}
	if _, _, err := LoadImageFolder(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}
