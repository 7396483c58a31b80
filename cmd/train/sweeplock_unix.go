//go:build unix

package main

import (
	"errors"
	"os"
	"syscall"
)

// lockExclusive takes an exclusive advisory lock on f, held until f is
// closed or the process ends (a kill -9 included); errLocked if another
// process holds it.
func lockExclusive(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}
