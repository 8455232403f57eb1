package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/collector/wrap"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

func wrapCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit wrap --server NAME (--collector URL | --data-dir DIR) [flags] -- CMD ARGS...\n\n"+
			"Runs a stdio MCP server, relays its stdin, stdout and stderr byte for byte, exits with its status\n"+
			"and records every tools/call exchange. Its own log goes to --log-file only, never to stderr.\n\nflags:")
		fs.PrintDefaults()
	}
	server := fs.String("server", "", "the server's name in call records, e.g. oddlynew")
	logFile := fs.String("log-file", "", "write the wrapper's own log here (JSON lines); default: no log")
	var rf relayFlags
	rf.register(fs, "wrap")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return &exitError{code: 2, err: errors.New("no server command: mcpaudit wrap [flags] -- CMD ARGS...")}
	}
	if err := rf.validate(*server); err != nil {
		return &exitError{code: 2, err: err}
	}
	log := slog.New(slog.DiscardHandler)
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--log-file: %w", err)}
		}
		defer f.Close()
		log = newJSONLogger(f, slog.LevelInfo)
	}
	if rf.source == "" {
		rf.source = relaySource("wrap", *server, hostname(), strconv.Itoa(os.Getpid()))
	}
	reg := metrics.NewRegistry()
	m, err := metrics.NewRelay(reg, *server)
	if err != nil {
		return err
	}
	if rf.metricsListen != "" {
		if _, err := serveMetrics(ctx, rf.metricsListen, reg, log); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	// The engine of --data-dir logs to the wrapper's log, never to stderr.
	sink, err := openRelaySink(context.Background(), &rf, "wrap", *server, rf.source, m, log)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	dest := []any{"collector", rf.collector}
	if rf.dataDir != "" {
		dest = []any{"data_dir", rf.dataDir}
	}
	log.Info("mcpaudit wrap", append([]any{"server", *server, "source", "calls:" + rf.source, "command", argv[0]}, dest...)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	if f, ok := stderr.(*os.File); ok {
		cmd.Stderr = f // the child writes to the same file, untouched
	}
	// Signals that would end the wrapper go to the child instead: the
	// wrapper ends when the child does, with its status.
	go func() {
		<-ctx.Done()
		if cmd.Process != nil {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}()
	rl := &wrap.Relay{Recorder: tap.NewRecorder(*server, func(r *tap.Record) {
		m.Record(*server, r.Outcome())
		sink.Record(r)
	}), Metrics: m}
	if j := sink.Journal(); j != nil {
		rl.Recorder.SetJournal(j)
	}
	status, err := rl.Run(cmd, stdin, stdout)
	if err == nil {
		log.Info("child exited", "status", status)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopSink(sctx, sink, -1, log)
	if err != nil {
		return &exitError{code: 127, err: fmt.Errorf("cannot run %s: %w", argv[0], err)}
	}
	if status != 0 {
		return &exitError{code: status}
	}
	return nil
}
