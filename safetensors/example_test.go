package safetensors_test

import (
	"bytes"
	"fmt"

	"github.com/dpmf-go/dpmf/safetensors"
)

// A tensor written as BF16 and read back as float32, with the file's
// metadata.
func Example() {
	var b bytes.Buffer
	err := safetensors.Write(&b, []safetensors.Tensor{
		{Name: "layer.weight", Shape: []int{2, 2}, DType: safetensors.BF16, Data: []float32{1, 0.5, -3, 3.14159}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		fmt.Println(err)
		return
	}
	f, err := safetensors.Open(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		fmt.Println(err)
		return
	}
	t, _ := f.Lookup("layer.weight")
	v, err := f.Float32s(t)
	fmt.Println(t.DType, t.Shape, v, f.Metadata["format"], err)

	// A header that claims more bytes than the file has is one line.
	_, err = safetensors.Open(bytes.NewReader(b.Bytes()[:20]), 20)
	fmt.Println(err)
	// Output:
	// BF16 [2 2] [1 0.5 -3 3.140625] pt <nil>
	// safetensors: header length 104 is beyond the end of the file (20 bytes)
}
