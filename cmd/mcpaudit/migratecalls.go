package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

const migrateCallsUsage = `usage: mcpaudit migrate-calls --data-dir DIR

Moves the calls of the embedded store's calls table in DIR into call logs
under DIR/calls/ (serve.sqlite.calls: log), so that a data dir written with
calls: sqlite keeps its calls in the logs from serve's next start with
serve.sqlite.calls: auto or log. The collector must be stopped: it takes
the data dir's lock. The calls are appended to the logs in time order
(each batch synced), then deleted from the table as retention deletes
calls: each one's hash is kept in the chain's records of removed rows, so
mcpaudit verify still finds every chain entry whole (the moved calls, in
the logs, are then checked by their blocks' checksums only, as every call
of the logs is). Writes, findings, finding states and answers stay where
they are. Broken off, it leaves calls in both the table and the logs,
which serve refuses to open with calls: auto: run it again to finish (a
call already in the logs is not appended twice). Take a backup first
(mcpaudit backup). With a signing key, serve's next start signs the
chain's new entries.

flags:
`

// migrateCallsCommand implements mcpaudit migrate-calls.
func migrateCallsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate-calls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, migrateCallsUsage); fs.PrintDefaults() }
	dir := fs.String("data-dir", "", "the data dir of the embedded store (serve stopped)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *dir == "" {
		return &exitError{code: 2, err: errors.New("--data-dir is required")}
	}
	path := filepath.Join(*dir, storeFile)
	if err := storeExists(*dir, path); err != nil {
		return &exitError{code: 2, err: err}
	}
	d, err := datadir.Open(*dir)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("calls not moved: %w", err)}
	}
	defer d.Close()
	logs, err := calllogs.Open(calllogs.Dir(*dir), calllog.Options{})
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("calls not moved: %w", err)}
	}
	// The store's messages (a migration of its schema, an ack: log call
	// log applied before it answers) go to stderr.
	o := sqlite.NewDefaultOptions()
	o.Calls, o.Logger = sqlite.CallsSQLite, slog.New(slog.NewTextHandler(stderr, nil))
	st, err := sqlite.OpenContext(ctx, path, o)
	if err != nil {
		logs.Close()
		return &exitError{code: 1, err: fmt.Errorf("calls not moved: %w", err)}
	}
	start := time.Now()
	moved, held, err := st.MoveCalls(ctx, logs)
	cerr := st.Close()
	lerr := logs.Close()
	if err = errors.Join(err, cerr, lerr); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("%w (%d calls appended to the call logs before it; run migrate-calls again to finish)", err, moved)}
	}
	fmt.Fprintf(stdout, "moved %d calls from the calls table of %s into the call logs %s in %s", moved, path, calllogs.Dir(*dir), time.Since(start).Round(time.Millisecond))
	if held > 0 {
		fmt.Fprintf(stdout, " (%d more were in the logs already)", held)
	}
	fmt.Fprintln(stdout, "; serve keeps calls there with serve.sqlite.calls: auto or log (not sqlite, which would not read them)")
	return nil
}
