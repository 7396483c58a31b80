package aggregate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
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
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer recoverCorrupt(path, &err)
	db, err = bolt.Open(path, 0o600, opts)
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("aggregate: opening store %s: it is locked by another process (%w)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("aggregate: opening store %s: %w", path, err)
	}
	return db, nil
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
