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
//	train predict [flags]     class probabilities from a saved model for inputs (JSON lines or CSV)
//
// Run "train <command> -h" for the flags of each. Invalid input exits with
// status 2 and a one-line message on standard error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/dpmf-go/dpmf/blas"
)

// usageError marks bad input: it exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	// The fast GEMM serves gorgonia's convolutions and matrix products and
	// gonum's LAPACK in the factorization optimizers.
	blas.Install()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	cmd := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "":
		err = runDefault(ctx, args, stdout, stderr)
	case "run":
		err = runTrain(ctx, args, stdout, stderr)
	case "compare":
		err = runCompare(ctx, args, stdout, stderr)
	case "eval":
		err = runEval(ctx, args, stdout, stderr)
	case "predict":
		err = runPredict(ctx, args, os.Stdin, stdout, stderr)
	case "account":
		err = runAccount(args, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, "usage: train [run|compare|account] [flags]; train <command> -h for flags")
		return 0
	default:
		err = usagef("unknown command %q: want run, compare or account", cmd)
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "train: "+oneLine(err.Error()))
	var ue usageError
	if errors.As(err, &ue) || isInvalid(err) {
		return 2
	}
	return 1
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// newFlags returns a flag set that reports errors instead of exiting and
// prints its usage to stderr.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("train "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
