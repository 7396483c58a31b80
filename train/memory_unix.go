//go:build unix

package train

import "syscall"

// addressSpaceLimit is the process's address-space limit (ulimit -v), or
// 0 when there is none.
func addressSpaceLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &rl); err != nil || rl.Cur > 1<<62 { // RLIM_INFINITY is all ones
		return 0
	}
	return int64(rl.Cur)
}
