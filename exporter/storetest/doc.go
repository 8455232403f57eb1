// Package storetest is the conformance suite of audit.Store: every backend
// (the embedded SQLite store, ClickHouse) runs Run against itself, so that
// the contract written on the interface is checked the same way everywhere.
// It also carries the sample captures and a generator of realistic calls for
// the backends' benchmarks.
package storetest
