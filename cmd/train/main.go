// Command train trains models with differential privacy, compares noise
// mechanisms and does privacy accounting.
//
// Usage:
//
//	train                     a small private run on Fashion-MNIST (embedded subset if the Debian package is absent)
//	train run [flags]         full training (Fashion-MNIST, MNIST, CIFAR-10 by directory)
//	train compare [flags]     mechanism comparison table (loss, RMSE, sensitivity)
//	train account [flags]     epsilon for a noise multiplier, or the multiplier for an epsilon
//	train eval [flags]        test loss and accuracy of a model saved by train run -save-model
//	train predict [flags]     class probabilities from a saved model for inputs (JSON lines or CSV), or next-token log-probabilities of token sequences
//	train audit [flags]       lower-bound the epsilon of a run empirically (canaries)
//	train plot [flags]        loss, accuracy and epsilon plot of a run's metrics file
//	train export [flags]      a model file's parameters as safetensors (PyTorch names and layout)
//	train import [flags]      a model file from a safetensors file written by train export or a GPT-2 directory
//	train sweep [flags]       a grid of mechanisms x samplings x epsilons x seeds over one recipe, resumable; or a private selection
//	train version             module version and commit of this binary (also train -version)
//
// Run "train <command> -h" for the flags of each. Invalid input exits with
// status 2 and a one-line message on standard error. SIGINT or SIGTERM
// during training saves a checkpoint (with -checkpoint) and exits with
// status 130; the same command resumes the run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/internal/buildinfo"
	"github.com/dpmf-go/dpmf/train"
)

// usageError marks bad input: it exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// inputError marks an error the user fixes by changing the input (a
// dataset, a checkpoint, a file named by a flag): it exits with status 2
// and keeps the error it wraps for errors.Is.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // the shell's convention for a run ended by SIGINT
)

func main() {
	// The fast GEMM serves gorgonia's convolutions and matrix products and
	// gonum's LAPACK in the factorization optimizers.
	blas.Install()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const commandsUsage = `Usage of train:
  train [flags]           a small private run on Fashion-MNIST (the flags of "train run")
  train run [flags]       full training (Fashion-MNIST, MNIST, CIFAR-10/100 by directory)
  train compare [flags]   mechanism comparison table (loss, RMSE, sensitivity)
  train account [flags]   epsilon for a noise multiplier, or the multiplier for an epsilon
  train audit [flags]     lower-bound the epsilon of a run empirically (the flags of train run, plus canaries)
  train eval [flags]      test loss and accuracy of a model saved by train run -save-model
  train predict [flags]   class probabilities (JSON lines or CSV), or next-token log-probabilities of token sequences
  train plot [flags]      loss, accuracy and epsilon plot of a run's metrics file (PNG or SVG)
  train export [flags]    a model file's parameters as safetensors (PyTorch names and layout)
  train import [flags]    a model file from a safetensors file written by train export or a GPT-2 directory (-dir)
  train sweep [flags]     a grid of mechanisms x samplings x epsilons x seeds over one recipe (resumable), or a private selection (-select)
  train worker [flags]    one shard of a run on workers (train run -workers W -nats URL; README)
  train version           module version and commit of this binary (also train -version)
Run "train <command> -h" for the flags of each command.
`

// commandNames lists every command, for the unknown-command message.
const commandNames = "run, compare, account, audit, eval, predict, plot, export, import, sweep, worker or version"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	if cmd == "" && len(args) > 0 && (args[0] == "-version" || args[0] == "--version") {
		cmd, args = "version", args[1:]
	}
	switch cmd {
	case "":
		err = runDefault(ctx, args, stdout, stderr)
	case "run":
		err = runTrainRefusingAuditFlags(ctx, args, stdout, stderr)
	case "audit":
		err = runAudit(ctx, args, stdout, stderr)
	case "compare":
		err = runCompare(ctx, args, stdout, stderr)
	case "eval":
		err = runEval(ctx, args, stdout, stderr)
	case "predict":
		err = runPredict(ctx, args, os.Stdin, stdout, stderr)
	case "account":
		err = runAccount(args, stdout, stderr)
	case "plot":
		err = runPlot(args, stdout, stderr)
	case "export":
		err = runExport(args, stdout, stderr)
	case "import":
		err = runImport(args, stdout, stderr)
	case "sweep":
		err = runSweep(ctx, args, stdout, stderr)
	case "worker":
		err = runWorker(ctx, args, stdout, stderr)
	case "version":
		if len(args) > 0 {
			err = usagef("version takes no arguments")
			break
		}
		fmt.Fprintln(stdout, "train "+buildinfo.Read().String())
		return exitOK
	case "help":
		fmt.Fprint(stdout, commandsUsage)
		return exitOK
	default:
		err = usagef("unknown command %q: want %s (train -h lists them)", cmd, commandNames)
	}
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, errorLine(err))
	var ue usageError
	switch {
	case errors.Is(err, train.ErrInterrupted):
		return exitInterrupted
	case errors.As(err, &ue) || errors.As(err, new(inputError)) || isInvalid(err) || errors.Is(err, train.ErrDiverged):
		return exitUsage
	}
	return exitFailure
}

// errorLine is the one line printed for err: the program name once, then
// the message with every package prefix said once.
func errorLine(err error) string {
	msg := oneLine(err.Error())
	msg = strings.TrimPrefix(msg, "train: ")
	return "train: " + dedupPrefixes(msg)
}

// dedupPrefixes removes a word-colon prefix that immediately repeats the
// one before it ("train: sampler: sampler: x" becomes "train: sampler: x").
func dedupPrefixes(msg string) string {
	fields := strings.SplitAfter(msg, ": ")
	out := fields[:0]
	for i, f := range fields {
		if i > 0 && f == fields[i-1] && isPrefixWord(f) {
			continue
		}
		out = append(out, f)
	}
	return strings.Join(out, "")
}

func isPrefixWord(f string) bool {
	w := strings.TrimSuffix(f, ": ")
	if w == "" || w == f {
		return false
	}
	for _, r := range w {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// newFlags returns a flag set that reports errors instead of exiting. Parse
// errors are returned as one line with a hint; -h prints the full usage.
// The flag set of the default command (name "" or "train") is "train".
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	full := "train " + name
	if name == "" || name == "train" {
		full = "train"
	}
	fs := flag.NewFlagSet(full, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args. A parse error is one line with a hint; -h prints
// the usage (the commands first for plain "train") to the flag set's output.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard) // the flag package would print the error and the whole usage
	restore := explainValues(fs)
	err := fs.Parse(args)
	restore()
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if fs.Name() == "train" {
				fmt.Fprint(out, commandsUsage)
				fmt.Fprintln(out, "\nFlags of train and train run:")
			} else {
				fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			}
			fs.PrintDefaults()
			return err
		}
		return usagef("%s: %v (%s -h lists the flags)", strings.TrimPrefix(fs.Name(), "train "), err, fs.Name())
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (%s -h lists the flags)", fs.Arg(0), fs.Name())
	}
	return nil
}

// explainValues wraps every integer and float flag of fs so that a value
// that does not parse says what is wanted ("want an integer") instead of
// strconv's "parse error"; the returned function restores the flags.
func explainValues(fs *flag.FlagSet) (restore func()) {
	type saved struct {
		f *flag.Flag
		v flag.Value
	}
	var all []saved
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		switch g.Get().(type) {
		case int, int64, uint, uint64, float64:
			all = append(all, saved{f, f.Value})
			f.Value = explainedValue{g}
		}
	})
	return func() {
		for _, s := range all {
			s.f.Value = s.v
		}
	}
}

// explainedValue is a numeric flag whose Set errors say what is wanted.
type explainedValue struct{ flag.Getter }

func (v explainedValue) Set(s string) error {
	err := v.Getter.Set(s)
	if err == nil {
		return nil
	}
	switch v.Get().(type) {
	case float64:
		return errors.New("want a number")
	}
	if _, perr := strconv.ParseInt(s, 0, 64); errors.Is(perr, strconv.ErrRange) {
		return fmt.Errorf("want an integer of at most %d", math.MaxInt64)
	}
	if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return fmt.Errorf("want an integer (write %d, not %s)", int64(f), s)
	}
	return errors.New("want an integer")
}
