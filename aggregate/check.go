package aggregate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrStoreCorrupt is wrapped when a store fails bbolt's consistency check,
// a stored value fails its checksum or shape, or bbolt itself panics on
// the file. A corrupt store is never repaired in place.
var ErrStoreCorrupt = errCorrupt

// recoverCorrupt turns a panic of bbolt's page assertions while reading
// path into an error wrapping ErrStoreCorrupt; use it deferred.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("aggregate: store %s: %w: bbolt failed reading it: %v", path, errCorrupt, r)
	}
}

// openBolt opens a bbolt file, turning a panic of bbolt's page assertions
// (a corrupt file) into an error wrapping ErrStoreCorrupt and a lock held
// by another process into a one-line error wrapping bolt.ErrTimeout.
//
// A file that is not a bbolt store (text, an empty file opened read only,
// a file cut short) wraps ErrStoreCorrupt too, with what is wrong.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer recoverCorrupt(path, &err)
	if opts != nil && opts.ReadOnly {
		// bbolt would try to initialize it and fail with "bad file descriptor".
		if st, serr := os.Stat(path); serr == nil && st.Mode().IsRegular() && st.Size() == 0 {
			return nil, fmt.Errorf("aggregate: store %s: %w: the file is empty (0 bytes), not a store", path, errCorrupt)
		}
	}
	db, err = bolt.Open(path, 0o600, opts)
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, bolt.ErrTimeout):
		return nil, fmt.Errorf("aggregate: opening store %s: it is locked by another process, a dpserve still running on it? (%w)", path, err)
	case errors.Is(err, bolt.ErrInvalid), errors.Is(err, bolt.ErrVersionMismatch), errors.Is(err, bolt.ErrChecksum):
		return nil, fmt.Errorf("aggregate: store %s: %w: not a bbolt file, or its header is damaged (%v)", path, errCorrupt, err)
	case strings.HasPrefix(err.Error(), "file size too small"):
		// bbolt's message for a file shorter than its two meta pages.
		return nil, fmt.Errorf("aggregate: store %s: %w: the file is cut short (%v)", path, errCorrupt, err)
	}
	return nil, fmt.Errorf("aggregate: opening store %s: %w", path, err)
}

// CheckStore runs bbolt's consistency check (every page reachable once,
// none both used and free, keys in order) over an existing store, read
// only, and returns the first problem as an error wrapping
// ErrStoreCorrupt; a missing file is not an error (Open creates it). It
// reads the whole file: about the time of copying it.
func CheckStore(path string) (err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := openBolt(path, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return err
	}
	defer db.Close()
	defer recoverCorrupt(path, &err)
	return db.View(func(tx *bolt.Tx) error {
		var first error
		for e := range tx.Check() {
			if first == nil {
				first = e
			}
		}
		if first != nil {
			return fmt.Errorf("aggregate: store %s: %w: bbolt's consistency check: %v", path, errCorrupt, first)
		}
		return nil
	})
}

// loadGuarded is load, with a panic of bbolt on a corrupt page turned into
// an error.
func (a *Aggregator) loadGuarded(path string) (err error) {
	defer recoverCorrupt(path, &err)
	return a.load()
}
