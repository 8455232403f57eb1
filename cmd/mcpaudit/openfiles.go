package main

import (
	"cmp"
	"log/slog"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// openFilesReserve is what serve holds open besides the call logs and the
// connections, with a margin: the store's SQLite files (the file, its WAL
// and shared memory, once per connection), the id index, the state files,
// the listeners, the standard streams.
const openFilesReserve = 64

// openFilesNeed is what serve with its calls in call logs may hold open at
// once: each tenant's live segment (the tenants whose log exists and
// those the configuration names, the default tenant included), the bound
// on the sealed segments' files (serve.sqlite.call_log_open_files), every
// listener's connections at their cap
// (serve.connections.max_per_listener), and openFilesReserve.
type openFilesNeed struct {
	tenants, sealed, conns int
}

func (n openFilesNeed) total() uint64 {
	return uint64(n.tenants + n.sealed + n.conns + openFilesReserve)
}

// callLogFilesNeed returns what cfg needs open with its calls in call
// logs, logTenants being the tenants whose log exists.
func callLogFilesNeed(cfg Config, logTenants []string) openFilesNeed {
	tenants := map[string]bool{"": true}
	for _, t := range logTenants {
		tenants[t] = true
	}
	for _, t := range cfg.Serve.Receiver.Tenants {
		tenants[t] = true
	}
	for _, c := range cfg.Serve.Credentials {
		tenants[c.Tenant] = true
	}
	for _, c := range cfg.Serve.Auth.ClientCerts {
		tenants[c.Tenant] = true
	}
	listeners := 2 // ingest, API
	if cfg.Serve.GRPCListen != "" {
		listeners++
	}
	return openFilesNeed{
		tenants: len(tenants),
		sealed:  cmp.Or(cfg.Serve.SQLite.CallLogOpenFiles, sqlite.NewDefaultOptions().CallLogOpenFiles),
		conns:   listeners * cmp.Or(cfg.Serve.Connections.MaxPerListener, NewDefaultConnectionsConfig().MaxPerListener),
	}
}

// checkOpenFiles raises the soft limit on open files to the hard one
// (openFilesLimit) and says at start whether it covers need: a WARN when
// it does not (adv51: past it, a new tenant's calls were refused 503 "too
// many open files"), an INFO when it does. The tenants with a token file
// (serve.auth.tokens_file) are known only as their logs are made.
func checkOpenFiles(log *slog.Logger, need openFilesNeed) {
	limit, ok := openFilesLimit()
	if !ok {
		return
	}
	attrs := []any{"limit", limit, "need", need.total(), "tenants", need.tenants,
		"call_log_open_files", need.sealed, "connections", need.conns, "reserve", openFilesReserve}
	if limit >= need.total() {
		log.Info("the limit on open files (RLIMIT_NOFILE) covers the call logs and the connections", attrs...)
		return
	}
	log.Warn("the limit on open files (RLIMIT_NOFILE) is below what this configuration needs: past it a new tenant's calls "+
		"are refused (503, too many open files) and connections fail; raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, "+
		"docker --ulimit nofile=N:N) or lower serve.sqlite.call_log_open_files or serve.connections.max_per_listener "+
		"(each tenant keeps its live segment open besides)", attrs...)
}
