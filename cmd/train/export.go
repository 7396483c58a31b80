package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/safetensors"
)

// runExport writes a model file's parameters in another format:
// safetensors, in PyTorch's names and layout (models.WriteSafetensors).
func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("export", stderr)
	format := fs.String("format", "safetensors", "output format: safetensors")
	modelFile := fs.String("model-file", "", "model file written by train run -save-model (required)")
	out := fs.String("o", "", "output file (required; replaced atomically)")
	dtype := fs.String("dtype", "F32", "element type: F32 (every bit), F16 or BF16 (rounded to nearest)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "safetensors" {
		return usagef("-format %q: want safetensors", *format)
	}
	dt, err := safetensors.ParseDType(strings.ToUpper(*dtype))
	if err != nil || dt.Size() > 4 {
		return usagef("-dtype %q: want F32, F16 or BF16", *dtype)
	}
	if *out == "" {
		return usagef("-o FILE is required")
	}
	tr, err := loadModelFile(*modelFile)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := models.WriteSafetensors(&b, tr.Model, tr.Metadata, dt); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(*out, b.Bytes()); err != nil {
		return fmt.Errorf("-o: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "wrote %s: %s, %d tensors, %d parameters as %v (PyTorch names and layout)\n",
		*out, tr.Architecture.Name, len(tr.Architecture.Params), tr.Model.NumParams(), dt)
	return err
}

// runImport makes a model file from a file of another format: a
// safetensors file written by train export.
func runImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("import", stderr)
	format := fs.String("format", "safetensors", "input format: safetensors (written by train export)")
	input := fs.String("input", "", "file to import (required)")
	out := fs.String("o", "", "model file to write (required; replaced atomically)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "safetensors" {
		return usagef("-format %q: want safetensors", *format)
	}
	if *input == "" || *out == "" {
		return usagef("-input FILE and -o MODEL are required")
	}
	tr, err := models.ReadSafetensorsFile(*input)
	if err != nil {
		return inputError{err}
	}
	if err := models.WriteFile(*out, tr.Model, tr.Metadata); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s: %s, %d parameters from %s; privacy: %s\n",
		*out, tr.Architecture.Name, tr.Model.NumParams(), *input, tr.Metadata.Privacy)
	return err
}
