// Package calllog is an append-only, segmented log of calls: one log per
// tenant, each append group-committed with the appends that wait beside it
// into one block compressed with zstd, written and synced with fdatasync
// before it is acknowledged; duplicates of a call id stored before are held
// back without a random B-tree insert, looked up in the live segment's
// in-memory table and the sorted id tables of the sealed segments whose time
// range covers the call's millisecond. Segments are sealed by size or age,
// with their id table, time index and document and session index written
// beside them (the tables read back when a lookup needs them, within a
// bound), and removed whole by retention.
//
// It stores each call in the encoding of the embedded store
// (exporter/sqlite.AppendRecord) and is not wired into serve yet
// (docs/storage.md, "Not built yet").
package calllog
