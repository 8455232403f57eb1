package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/report"
)

// reportCommand implements `mcpaudit report`: the month-end
// write-durability report from a data dir, a ClickHouse store, or a running
// server's /api/v1/report.
func reportCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	window := fs.String("window", "30d", "window back from --until (30d, 7d, 3650d)")
	until := fs.String("until", "", "end of the window: RFC 3339, a UTC time such as \"2026-12-04 14:02\", or a duration back from now such as 1d (default now)")
	format := fs.String("format", "html", "html (one self-contained file), md or json")
	target := fs.String("target", "", "SLO target, a fraction in (0, 1]; 1 is 100 %: no error budget (default the configuration's, 0.999)")
	mcpServer := fs.String("mcp-server", "", "only this MCP server")
	out := fs.String("o", "", "write the report to this file instead of standard output")
	server := fs.String("api-url", "", "URL of a running mcpaudit serve API (e.g. http://localhost:9464); the report is computed there")
	fs.StringVar(server, "server", "", "deprecated: use --api-url (--mcp-server names an MCP server)")
	token := fs.String("token", os.Getenv("MCPAUDIT_TOKEN"), "bearer token, with --api-url (default $MCPAUDIT_TOKEN)")
	var ctls clientFlags
	ctls.register(fs)
	dataDir := fs.String("data-dir", "", "data dir of the embedded store (default ./mcpaudit-data)")
	store := fs.String("store", "", "sqlite (the data dir) or clickhouse")
	chDSN := fs.String("clickhouse-dsn", "", "ClickHouse native-protocol DSN, with --store clickhouse")
	configFile := fs.String("config", "", "YAML config file (store, ClickHouse options, SLO target)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: mcpaudit report --window 30d [--format html|md|json] (--data-dir DIR | --api-url URL | --store clickhouse --clickhouse-dsn DSN)\n\n"+
			"Print the write-durability report: SLI against target and error budget, bad events by cause,\n"+
			"server, tool and client, findings by kind and state, the retry-action mix, the worst days.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("report: unexpected argument %q", fs.Arg(0))}
	}
	if *server != "" && !strings.Contains(*server, "://") {
		// The deprecated --server takes the API's URL; an MCP server's name
		// given to it (as proxy and wrap take --server) is meant for --mcp-server.
		return &exitError{code: 2, err: fmt.Errorf("report: --server %q is not a URL: --server is the deprecated name of --api-url (http://HOST:9464); to report on one MCP server, use --mcp-server %s", *server, *server)}
	}
	if !strings.Contains(" html md json ", " "+*format+" ") {
		return &exitError{code: 2, err: fmt.Errorf("report: --format must be html, md or json, not %q", *format)}
	}
	cfg := NewDefaultConfig()
	if *configFile != "" {
		var err error
		if cfg, err = LoadConfig(*configFile); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	if *dataDir != "" {
		cfg.Serve.DataDir = *dataDir
	}
	if *store != "" {
		cfg.Serve.Store = *store
	}
	if *chDSN != "" {
		cfg.Serve.ClickHouse.DSN = *chDSN
	}
	if *server != "" && (*dataDir != "" || *store != "") {
		return &exitError{code: 2, err: errors.New("report: give --api-url or a store (--data-dir, --store), not both")}
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("cannot create %s: %w", *out, err)}
		}
		defer f.Close()
		w = f
	}
	if *server != "" {
		return reportFromServer(ctx, w, *server, *token, &ctls, url.Values{"window": {*window}, "until": {*until},
			"target": {*target}, "server": {*mcpServer}, "format": {*format}})
	}
	q, err := report.QueryOf(*window, *until, *target, cfg.Serve.SLOTarget, time.Now())
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("report: %w", err)}
	}
	q.Server = *mcpServer
	st, err := openReportStore(ctx, cfg)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer st.Close()
	rep, err := report.Build(ctx, st, q)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if s := rep.Stored; s != nil {
		// The report says it too; standard error tells whoever wrote it
		// to a file with -o (op46).
		fmt.Fprintf(stderr, "mcpaudit report: no write is dated in the %s window ending %s; the stored writes run from %s to %s (a write counts at its call's event time): end the window there with --until %q --window %s\n",
			rep.Window, rep.Until.Format("2006-01-02 15:04:05 MST"), s.First.Format("2006-01-02 15:04:05 MST"), s.Last.Format("2006-01-02 15:04:05 MST"), s.Until, s.Window)
	}
	return report.Render(w, rep, *format)
}

// openReportStore opens the configured store to read. The embedded store
// is opened as the other commands that read a data dir open it
// (openReading): its call logs, when serve keeps the calls in them,
// read-only beside a running serve. Whether the calls are in logs is the
// data dir's to say, not the configuration's: a report without --config
// over such a data dir read no call before (its failures and retry
// actions were missing), and one with serve.sqlite.calls: log failed.
func openReportStore(ctx context.Context, cfg Config) (audit.Store, error) {
	switch cfg.Serve.Store {
	case "sqlite", "":
		if err := storeExists(cfg.Serve.DataDir, filepath.Join(cfg.Serve.DataDir, storeFile)); err != nil {
			return nil, err
		}
		st, err := openReading(cfg.Serve.DataDir)
		if err != nil {
			return nil, err
		}
		return st, nil
	case "clickhouse":
		o := cfg.Serve.ClickHouse
		// The report writes nothing: its spool stays empty, in a
		// directory of its own.
		dir, err := os.MkdirTemp("", "mcpaudit-report-spool")
		if err != nil {
			return nil, err
		}
		o.Spool.Dir = dir
		st, err := clickhouse.Open(ctx, o)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return removeOnClose{st, dir}, nil
	}
	return nil, fmt.Errorf("unknown store %q (want sqlite or clickhouse)", cfg.Serve.Store)
}

// removeOnClose removes a directory when its store closes.
type removeOnClose struct {
	audit.Store
	dir string
}

func (r removeOnClose) Close() error {
	err := r.Store.Close()
	os.RemoveAll(r.dir)
	return err
}

// reportFromServer fetches the report from a running server.
func reportFromServer(ctx context.Context, w io.Writer, server, token string, ctls *clientFlags, params url.Values) error {
	for k, v := range params {
		if len(v) == 0 || v[0] == "" {
			delete(params, k)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(server, "/")+"/api/v1/report?"+params.Encode(), nil)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client, err := ctls.httpClient(5 * time.Minute)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	resp, err := client.Do(req)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("cannot reach %s: %w", server, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &exitError{code: 2, err: apiError(resp, b)}
	}
	_, err = io.Copy(w, resp.Body)
	return err
}
