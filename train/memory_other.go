//go:build !unix

package train

// addressSpaceLimit is 0: no address-space limit is known here.
func addressSpaceLimit() int64 { return 0 }
