package replica_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dpmf-go/dpmf/aggregate"
	"github.com/dpmf-go/dpmf/aggregate/replica"
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/privacy"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// One node of a replicated private sum, front-end and aggregator, on a
// JetStream server in this process with a token. In production the
// cluster has three servers on three machines (Replicas 3, the default),
// each machine runs a node, and the connection is encrypted.
func Example() {
	dir, _ := os.MkdirTemp("", "replica-example")
	defer os.RemoveAll(dir)
	srv, _ := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: dir, Authorization: "secret"})
	go srv.Start()
	srv.ReadyForConnections(10 * time.Second)
	defer srv.Shutdown()
	nc, _ := nats.Connect(srv.ClientURL(), nats.Token("secret"))
	defer nc.Close()

	// The engine: 2-dimensional contributions clipped to norm 1, a
	// private prefix sum over 16 releases with tree-online noise at
	// (1, 1e-6)-DP, each contributor joining one step.
	ctx := context.Background()
	mech, _ := privacy.ParseMechanism("tree-online")
	w, _ := dpcore.PrefixSum(16)
	schema, _ := privacy.Participation{K: 1, B: 1}.Schema()
	built, err := aggregate.BuildMechanism(ctx, mech, w, schema)
	if err != nil {
		fmt.Println(err)
		return
	}
	node, err := replica.New(ctx, nc, replica.Config{Service: "sums", Replicas: 1, WorkDir: dir,
		Aggregate: aggregate.Config{Dim: 2, Workload: aggregate.Workload{Kind: aggregate.PrefixSum}, Mechanism: built,
			Epsilon: 1, Delta: 1e-6, Clip: 1, K: 1, B: 1}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close()
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); node.RunAggregator(actx) }()
	defer func() { stop(); <-done }()

	// A contribution is durable once Add returns: with its step once
	// the aggregator decided, or logged (applied in log order) while none
	// leads yet.
	for i, v := range [][]float64{{0.5, 0.5}, {1, 0}, {0, -2}} {
		_, err := node.Add(ctx, fmt.Sprintf("user-%d", i), v)
		var logged *replica.LoggedError
		if err != nil && !errors.As(err, &logged) {
			fmt.Println(err)
			return
		}
	}
	rel, err := node.Commit(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	l := node.Ledger()
	fmt.Printf("release %d: %d values; the ledger: %d step of %d, %d contributions\n",
		rel.Step, len(rel.Sum), l.Steps, l.Horizon, l.ContributionsAccepted)
	// Output: release 1: 2 values; the ledger: 1 step of 16, 3 contributions
}
