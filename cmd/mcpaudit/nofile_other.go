//go:build !unix

package main

// openFilesLimit cannot tell the limit on open files here.
func openFilesLimit() (limit uint64, ok bool) { return 0, false }
