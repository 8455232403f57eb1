// Package datadir guards a collector's data directory: it keeps the
// directory private to its owner (0700, files 0600, whatever the umask) and
// holds a lock in it, so that a second process refuses to start on the same
// data instead of writing beside the first.
package datadir
