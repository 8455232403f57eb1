// Package capture reads capture files: NDJSON call records, JSON arrays of
// call records and OTLP JSON, plain or gzip, detected from their content. It
// streams audit calls and reports each bad record with its line and reason
// while keeping the good ones.
package capture
