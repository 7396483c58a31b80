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
	out := fs.String("o", "", "output file (this or -dir is required; replaced atomically)")
	dir := fs.String("dir", "", "write a Hugging Face GPT-2 directory (config.json, model.safetensors; adapters merged) instead of one file")
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
	if (*out == "") == (*dir == "") {
		return usagef("-o FILE is required (or -dir DIR, not both)")
	}
	tr, err := loadModelFile(*modelFile)
	if err != nil {
		return err
	}
	if *dir != "" {
		if err := models.WriteGPT2Dir(*dir, tr.Model, dt); err != nil {
			return inputError{err}
		}
		_, err = fmt.Fprintf(stdout, "wrote %s: config.json and model.safetensors (GPT-2 names, adapters merged) as %v\n", *dir, dt)
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
// safetensors file written by train export, or a Hugging Face GPT-2
// directory (-dir).
func runImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("import", stderr)
	format := fs.String("format", "safetensors", "input format: safetensors (written by train export)")
	input := fs.String("input", "", "file to import (this or -dir is required)")
	dir := fs.String("dir", "", "Hugging Face GPT-2 directory (config.json with model_type gpt2, model.safetensors)")
	out := fs.String("o", "", "model file to write (required; replaced atomically)")
	ctxLen := fs.Int("context", 0, "with -dir: keep the first N positions (0: n_positions)")
	rank := fs.Int("lora-rank", 0, "with -dir: add LoRA adapters of this rank")
	alpha := fs.Float64("lora-alpha", 0, "with -dir: LoRA alpha (0: twice the rank)")
	targets := fs.String("lora-targets", "attn.c_attn", "with -dir: comma-separated matrices that get adapters: attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj")
	freeze := fs.Bool("freeze-base", true, "with -dir and adapters or -classes: train only those")
	classes := fs.Int("classes", 0, "with -dir: replace the language-model head by a new classification head of this many classes")
	seed := fs.Uint64("seed", 1, "with -dir: seed of the new adapters and head")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *format != "safetensors" {
		return usagef("-format %q: want safetensors", *format)
	}
	if (*input == "") == (*dir == "") || *out == "" {
		return usagef("-input FILE (or -dir DIR, not both) and -o MODEL are required")
	}
	var tr *models.Trained
	var err error
	if *dir != "" {
		opt := models.GPT2Options{Context: *ctxLen, LoRARank: *rank, LoRAAlpha: *alpha, Classes: *classes, Seed: *seed}
		if *rank > 0 {
			opt.LoRATargets = strings.Split(*targets, ",")
			if opt.LoRAAlpha == 0 {
				opt.LoRAAlpha = 2 * float64(*rank)
			}
		}
		opt.FreezeBase = *freeze && (*rank > 0 || *classes > 0)
		tr, err = models.ReadGPT2Dir(*dir, opt)
	} else {
		tr, err = models.ReadSafetensorsFile(*input)
	}
	if err != nil {
		return inputError{err}
	}
	if *dir != "" {
		*input = *dir
	}
	if err := models.WriteFile(*out, tr.Model, tr.Metadata); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s: %s, %d parameters from %s; privacy: %s\n",
		*out, tr.Architecture.Name, tr.Model.NumParams(), *input, tr.Metadata.Privacy)
	return err
}
