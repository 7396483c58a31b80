package distributed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/dpmf-go/dpmf/train"
	"github.com/dpmf-go/dpmf/train/distributed"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Two workers, each holding half of the training data, and a coordinator
// that samples, adds the noise and applies the update, on a loopback NATS
// server with a token. In production the workers are processes on other
// machines (cmd/train: train worker), with the same data and settings.
func Example() {
	srv, _ := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Authorization: "secret"})
	go srv.Start()
	srv.ReadyForConnections(10 * time.Second)
	defer srv.Shutdown()

	tr, te, _ := data.LoadEmbeddedFashionMNIST()
	cfg := train.Config{
		Data:    train.Data{Train: tr, Test: te},
		Model:   train.ModelSpec{Name: "logistic"},
		Privacy: privacy.Request{Steps: 20, Batch: 100, Mechanism: mfnoise.DPSGD{}, Epsilon: 4, Accountant: privacy.RDP, Seed: []byte("example seed"), InsecureSeed: true},
	}
	opt := distributed.Options{Run: "example", Workers: 2}
	ctx := context.Background()
	for i := range 2 {
		nc, _ := nats.Connect(srv.ClientURL(), nats.Token("secret"))
		defer nc.Close()
		go distributed.Serve(ctx, nc, cfg, distributed.Shard{Index: i, Count: 2}, opt)
	}
	nc, _ := nats.Connect(srv.ClientURL(), nats.Token("secret"))
	defer nc.Close()
	res, err := distributed.Run(ctx, nc, cfg, opt)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d steps on 2 workers, (epsilon %.3g, delta %g), accuracy %.2f\n",
		res.Steps, res.Plan.Epsilon, res.Plan.Delta, res.Final.Accuracy)
	// Output: 20 steps on 2 workers, (epsilon 4, delta 1e-05), accuracy 0.59
}
