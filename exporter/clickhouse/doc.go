// Package clickhouse is the ClickHouse implementation of audit.Store: calls,
// write attempts and findings in ReplacingMergeTree tables ordered by tenant,
// server, document and time, partitioned by day.
//
// Writes are batched client-side (by size and age) and inserted over the
// native protocol. Each batch is built once and re-sent unchanged by every
// retry, with an insert_deduplication_token where the server has it; where
// it does not, a retry first skips the rows already stored. While ClickHouse
// is unreachable, batches are synced to a local spool before they are
// acknowledged and drained in order when it answers again.
//
// The server version is read at connect time: the same tables and queries
// serve every version, with TTL, CODECs, skip indexes and deduplication
// tokens added only where the server has them (docs/clickhouse.md has the
// matrix). Debian's 18.16 is the oldest server tested.
package clickhouse
