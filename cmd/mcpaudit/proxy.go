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
	return stopProxy(hs, p, sink, log)
}

// The bounds of a proxy's stop (docs/proxy.md, "Stopping"): open requests
// get proxyStopGrace to finish; then those still open are cut, and the
// cut and the flush of the records to the collector get at least
// proxyStopAfterGrace more, so that a hung upstream, which takes the whole
// grace, does not leave the flush an expired context (px19). Variables so
// that tests can shorten them.
var (
	proxyStopGrace      = 30 * time.Second
	proxyStopAfterGrace = 5 * time.Second
)

// stopProxy stops the HTTP server hs in front of p, records the calls it
// ends, flushes sink and logs the stop's last line.
func stopProxy(hs *http.Server, p *proxy.Proxy, sink recordSink, log *slog.Logger) error {
	grace := time.Now().Add(proxyStopGrace)
	sctx, cancel := context.WithDeadline(context.Background(), grace)
	defer cancel()
	cut := 0
	shut := make(chan error, 1)
	go func() { shut <- hs.Shutdown(sctx) }()
	// A session's GET stream stays open as long as its client lives: once
	// no call is in flight and only such streams are open, nothing
	// recorded can come any more, and the stop does not wait the grace
	// out for them (px19).
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var err error
	streamsOnly := false
wait:
	for {
		select {
		case err = <-shut:
			break wait
		case <-tick.C:
			if p.OnlyStreamsOpen() {
				streamsOnly = true
				cancel()
			}
		}
	}
	if err != nil {
		// Requests still open after the grace are cut: the clients'
		// connections first, so that none reads an answer made up by the
		// cut, then their upstream requests, and their calls are recorded
		// canceled before the journal and the buffer are closed.
		cctx, cancel := context.WithTimeout(context.Background(), proxyStopAfterGrace)
		cut = p.Cut(cctx, func() { hs.Close() })
		cancel()
		if streamsOnly {
			log.Info("no call in flight; the GET streams still open were closed")
		} else {
			log.Warn("stop grace over; requests still open were cut", "grace", proxyStopGrace, "calls_cut", cut)
		}
	}
	n := p.Close()
	// The flush has the rest of the grace, and at least proxyStopAfterGrace.
	fctx, fcancel := context.WithDeadline(context.Background(), later(grace, time.Now().Add(proxyStopAfterGrace)))
	defer fcancel()
	return stopSink(fctx, sink, cut+n, log)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// port is the port of a listener's address.
func port(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return strconv.Itoa(t.Port)
	}
	_, p, _ := net.SplitHostPort(a.String())
	return p
}
