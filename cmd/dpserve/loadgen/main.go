// Command loadgen sends a bounded load of contributions to a dpserve
// instance on a loopback address and prints the sustained contributions per
// second and the p50/p99 latency of the durable acknowledgements.
//
//	go run ./cmd/dpserve/loadgen -url http://127.0.0.1:8377 -dim 100 -workers 64 -n 20000 -duration 20s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/dpmf-go/dpmf/internal/loadgen"
)

func main() {
	var cfg loadgen.Config
	flag.StringVar(&cfg.BaseURL, "url", "http://127.0.0.1:8377", "dpserve base URL (loopback only)")
	flag.IntVar(&cfg.Dim, "dim", 100, "vector dimension (the server's -dim)")
	flag.IntVar(&cfg.Workers, "workers", 64, "concurrent clients")
	flag.IntVar(&cfg.Requests, "n", 20000, "most contributions to send")
	flag.DurationVar(&cfg.Duration, "duration", 20*time.Second, "most time to run")
	flag.DurationVar(&cfg.CommitEvery, "commit-every", 0, "commit a step at this interval (0: never)")
	flag.StringVar(&cfg.IDPrefix, "id-prefix", fmt.Sprintf("load-%d-", time.Now().UnixNano()), "contributor id prefix")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("d=%d workers=%d: %s\n", cfg.Dim, cfg.Workers, res)
}
