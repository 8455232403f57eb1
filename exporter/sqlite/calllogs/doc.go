// Package calllogs keeps the embedded store's calls in one segmented call
// log (internal/calllog) per tenant, under <data dir>/calls/<tenant>/
// (the tenant's name in hex, "-" for the default tenant ""): the
// sqlite.CallLog that serve.sqlite.calls: log opens. The SQLite store
// keeps everything else. It is a package of its own because
// internal/calllog imports exporter/sqlite for the calls' encoding.
package calllogs
