package models

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dpmf-go/dpmf/nn"
)

// BenchmarkPredict times inference on the planned executor (Predict) for
// the CIFAR CNN and an MLP on Fashion-MNIST shapes, batch 256; it reports
// examples per second.
func BenchmarkPredict(b *testing.B) {
	const batch = 256
	cnn, _ := NewCIFARCNN([3]int{3, 32, 32}, 10, 1)
	mlp, _ := NewMLP([3]int{1, 28, 28}, []int{128}, 10, nn.Tanh, 1)
	for _, m := range []Model{cnn, mlp} {
		x := randInputs(m, batch, 1)
		b.Run(fmt.Sprintf("%s/nn", m.Name()), func(b *testing.B) {
			var buf bytes.Buffer
			if err := Save(&buf, m, Metadata{}); err != nil {
				b.Fatal(err)
			}
			tr, err := Load(&buf)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, _, err := tr.Predict(x); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "examples/s")
		})
	}
}
