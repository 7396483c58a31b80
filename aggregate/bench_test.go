package aggregate

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// BenchmarkStoreCommit measures bbolt's durable commit rate on this machine
// with the write of one batch: the open step's accumulator (8 d bytes) and
// one participation record, fsync'd per transaction. It bounds the batches
// per second the aggregator can acknowledge; contributions per second is
// that times the contributions per batch.
//
//	go test -run - -bench StoreCommit -benchtime 2s ./aggregate
func BenchmarkStoreCommit(b *testing.B) {
	for _, d := range []int{100, 10000} {
		b.Run(fmt.Sprintf("d=%d", d), func(b *testing.B) {
			db, err := bolt.Open(filepath.Join(b.TempDir(), "b.db"), 0o600, &bolt.Options{FreelistType: bolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			acc := encodeVec(make([]float64, d+2))
			b.SetBytes(int64(len(acc)))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				err := db.Update(func(tx *bolt.Tx) error {
					bk, err := tx.CreateBucketIfNotExists(bucketMeta)
					if err != nil {
						return err
					}
					if err := bk.Put(keyOpen, acc); err != nil {
						return err
					}
					return bk.Put(fmt.Appendf(nil, "c%d", i), encodeSteps([]int{1}))
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tx/s")
		})
	}
}

// BenchmarkAdd measures durable contributions per second through the
// library (no HTTP) from 64 concurrent callers, and the mean batch size the
// group commit reached.
//
//	go test -run - -bench Add -benchtime 20000x ./aggregate
func BenchmarkAdd(b *testing.B) {
	for _, arith := range []string{"float", "exact"} {
		for _, d := range []int{100, 10000} {
			b.Run(fmt.Sprintf("%s/d=%d", arith, d), func(b *testing.B) {
				benchAdd(b, d, arith == "float")
			})
		}
	}
}

func benchAdd(b *testing.B, d int, float bool) {
	{
		{
			cfg := setup{mech: "tree-online", workload: Workload{Kind: PrefixSum}, n: 64, d: d, k: 1, b: 1, float: float}.config(b)
			a := open(b, filepath.Join(b.TempDir(), "s.db"), cfg)
			defer a.Close()
			vec := make([]float64, d)
			for i := range vec {
				vec[i] = 0.01
			}
			var id atomic.Int64
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := a.Add(context.Background(), fmt.Sprint("u", id.Add(1)), vec); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "contrib/s")
			b.ReportMetric(float64(b.N)/float64(a.batches.Load()), "contrib/batch")
		}
	}
}

// BenchmarkRelease measures one release (Commit of a step holding 16
// contributions) on the float path and with the exact arithmetic, per
// mechanism family, without fsync (a.db.NoSync): the arithmetic's cost
// alone. Horizon 128; the aggregator is rebuilt (off the clock) when it
// is exhausted.
//
//	go test -run - -bench Release -benchtime 64x ./aggregate
func BenchmarkRelease(b *testing.B) {
	for _, mech := range []string{"tree-online", "bandmf:4", "mf-single", "blt:2"} {
		for _, d := range []int{100, 10000} {
			for _, arith := range []string{"float", "exact"} {
				b.Run(fmt.Sprintf("%s/d=%d/%s", mech, d, arith), func(b *testing.B) {
					const n = 128
					cfg := setup{mech: mech, workload: Workload{Kind: PrefixSum}, n: n, d: d, k: 1, b: 1, float: arith == "float"}.config(b)
					ctx := context.Background()
					vec := make([]float64, d)
					for i := range vec {
						vec[i] = 0.01
					}
					var a *Aggregator
					step := n
					for i := 0; b.Loop(); i++ {
						b.StopTimer()
						if step == n {
							if a != nil {
								a.Close()
							}
							a = open(b, filepath.Join(b.TempDir(), fmt.Sprint(i, ".db")), cfg)
							a.db.NoSync = true
							step = 0
						}
						for j := range 16 {
							if _, err := a.Add(ctx, fmt.Sprint(i, "-", j), vec); err != nil {
								b.Fatal(err)
							}
						}
						b.StartTimer()
						if _, err := a.Commit(ctx); err != nil {
							b.Fatal(err)
						}
						step++
					}
					b.StopTimer()
					a.Close()
				})
			}
		}
	}
}
