// Package store holds what every audit.Store backend shares and writes
// only once: page limits, the timeline's events and their order, and the
// scheme by which a call's fingerprint is derived rather than stored. The
// embedded store (exporter/sqlite) and the ClickHouse store build their
// answers with it, so that for the same data they answer alike, as
// Litestream's replica clients share its root package.
package store
