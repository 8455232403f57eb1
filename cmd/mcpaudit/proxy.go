package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/proxy"
	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

func proxyCommand(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit proxy --listen ADDR --upstream URL --server NAME (--collector URL | --data-dir DIR) [flags]\n\n"+
			"Relays MCP Streamable HTTP to the upstream unchanged and records every tools/call exchange.\n\nflags:")
		fs.PrintDefaults()
	}
	def := proxy.NewDefaultConfig()
	listen := fs.String("listen", "127.0.0.1:8080", "address the proxy listens on")
	upstream := fs.String("upstream", "", "the MCP server's URL (paths are appended to its path)")
	server := fs.String("server", "", "the server's name in call records, e.g. thegram")
	respTimeout := fs.Duration("response-timeout", def.ResponseTimeout, "end a tools/call with no response after this and record it as a timeout; 0: never")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var rf relayFlags
	rf.register(fs, "proxy")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	cfg := def
	cfg.Upstream, cfg.Server, cfg.ResponseTimeout = *upstream, *server, *respTimeout
	// The flags are checked by their names first: the operator wrote no
	// proxy.* keys. cfg.Validate then checks what no flag sets.
	errs := []error{rf.validate(*server)}
	if *upstream == "" {
		errs = append(errs, errors.New("--upstream: required"))
	} else if err := proxy.CheckUpstream(*upstream); err != nil {
		errs = append(errs, fmt.Errorf("--upstream: %w", err))
	}
	if *respTimeout < 0 {
		errs = append(errs, errors.New("--response-timeout: must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: err}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--log-level: %w", err)}
	}
	log := newJSONLogger(stderr, level)
	// Listen first: the default source is named by the port, so that two
	// proxies of one server on one host are two sources, each with its own
	// clock, and a proxy restarted on its port is the same one.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", *listen, err)
	}
	// Closed on every way out; once served, Shutdown has closed it already.
	defer ln.Close()
	if rf.source == "" {
		rf.source = relaySource("proxy", *server, hostname()+":"+port(ln.Addr()), "")
	}
	reg := metrics.NewRegistry()
	m, err := metrics.NewRelay(reg, *server)
	if err != nil {
		return err
	}
	if rf.metricsListen != "" {
		addr, err := serveMetrics(ctx, rf.metricsListen, reg, log)
		if err != nil {
			return err
		}
		log.Info("relay metrics", "addr", addr)
	}
	sink, err := openRelaySink(ctx, &rf, "proxy", *server, rf.source, m, log)
	if err != nil {
		return err
	}
	p, err := proxy.New(cfg, func(r *tap.Record) { sink.Record(r) }, m, log)
	if err != nil {
		sink.Close(context.Background())
		return &exitError{code: 2, err: err}
	}
	if j := sink.Journal(); j != nil {
		p.Recorder().SetJournal(j)
	}
	// No write timeout: SSE streams are long-lived.
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	log.Info("mcpaudit proxy", "listen", ln.Addr().String(), "upstream", cfg.Upstream, "server", cfg.Server, "source", "calls:"+rf.source)
	<-ctx.Done()
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Streams that outlive the grace period are cut; their calls end as
	// canceled.
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	return stopSink(sctx, sink, p.Close(), log)
}

// port is the port of a listener's address.
func port(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return strconv.Itoa(t.Port)
	}
	_, p, _ := net.SplitHostPort(a.String())
	return p
}
