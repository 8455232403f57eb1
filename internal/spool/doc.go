// Package spool is the log in front of a store: batches appended to
// segment files and synced with fdatasync before they are acknowledged,
// drained into the store behind the acknowledgements, and removed once the
// store has them. The ClickHouse store spools while ClickHouse is
// unreachable and, with ack "log", always; the embedded store does with
// ack "log". Each store encodes its batches with a Codec of its own.
package spool
