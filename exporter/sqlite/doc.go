// Package sqlite is the embedded store of mcpaudit serve: an audit.Store in
// one SQLite file (modernc.org/sqlite, pure Go) in WAL mode.
//
// Appends are group-committed: one committer goroutine owns the only
// writing connection and commits the calls of concurrent AppendCalls in one
// transaction; each caller returns once that transaction has committed,
// with synchronous=full (the default) once the log is synced to disk.
// Queries run on read-only connections beside it.
//
// Calls are stored compactly: the fields that are not indexed, raw
// arguments and results included, go in one blob compressed with S2 against
// a frozen dictionary of typical calls (codec.go, dict_v2.bin); times are
// integer nanoseconds; the names and enumerations of writes are interned.
// Retention (DeleteBefore) deletes in bounded chunks; scheduling it is the
// caller's. docs/storage.md describes the schema, durability, recovery and
// the measured figures.
package sqlite
