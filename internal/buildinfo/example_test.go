package buildinfo_test

import (
	"fmt"

	"github.com/dpmf-go/dpmf/internal/buildinfo"
)

func Example() {
	// A command's -version flag prints one line such as
	// "github.com/dpmf-go/dpmf (devel), commit 0123abcd (2026-11-25T17:00:00Z), go1.26.8".
	info := buildinfo.Read()
	fmt.Println(info.Go != "")
	// Output: true
}
