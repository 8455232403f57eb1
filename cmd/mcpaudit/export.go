package main

import (
	"bufio"
	"bytes"
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

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

const exportUsage = `usage: mcpaudit export [--api-url URL | --data-dir DIR] [flags] [--out FILE]

Writes the stored calls of a time range as call records (NDJSON, the capture
format that analyze and POST /v1/calls read), in time order, one a line; the
count on standard error. mcpaudit analyze reads the output as it reads a
capture: the same calls, the same call ids, the same findings (where serve
masked a secret, with analyze --redact: the record holds the mask);
docs/api.md, "GET /api/v1/calls/export", says what a record cannot carry.

From a running serve (--api-url, GET /api/v1/calls/export; with ClickHouse
as its store, the only way), or from the data dir of the embedded store
(--data-dir), read-only from one snapshot while serve keeps running: no lock
is taken and nothing is written. Memory holds one page of calls; the output
streams. With --out the records go to a file that takes its name only once
the export is complete; on standard output a broken export ends with an
error and exit status 1.

flags:
`

// exportCommand implements mcpaudit export.
func exportCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, exportUsage); fs.PrintDefaults() }
	var q queryFlags
	fs.StringVar(&q.server, "api-url", "", "URL of a running mcpaudit serve API (e.g. http://localhost:9464); without it the data dir is read directly")
	fs.StringVar(&q.dataDir, "data-dir", "./mcpaudit-data", "data dir of the embedded store, read when --api-url is not given")
	fs.StringVar(&q.token, "token", os.Getenv("MCPAUDIT_TOKEN"), "bearer token for --api-url, needed when the server has any credential configured (default $MCPAUDIT_TOKEN)")
	q.tls.register(fs)
	server := fs.String("mcp-server", "", "only this MCP server's calls (default: every server)")
	session := fs.String("session", "", "only this MCP session's calls (mcp.session.id)")
	tenant := fs.String("tenant", "", "only this tenant's calls (default: every tenant the credential reads; each record names its tenant)")
	since := fs.String("since", "", "from this time on: RFC 3339, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now (1h, 7d)")
	until := fs.String("until", "", "before this time: RFC 3339, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now")
	out := fs.String("out", "", "write the records to this file, which must not exist (default: standard output)")
	if help, err := parseFlagsOnce(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("export: unexpected argument %q", fs.Arg(0))}
	}
	now := time.Now()
	var cq audit.CallQuery
	cq.Server, cq.Session, cq.Tenant = *server, *session, *tenant
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", *since, &cq.Since}, {"until", *until, &cq.Until}} {
		if t.v == "" {
			continue
		}
		v, err := api.ParseTime(t.v, now)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("export: --%s: %w", t.name, err)}
		}
		*t.dst = v
	}
	if err := api.CheckRange(cq.Since, cq.Until); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("export: --until: %w", err)}
	}
	var path string
	if q.server == "" {
		path = filepath.Join(q.dataDir, storeFile)
		if err := storeExists(q.dataDir, path); err != nil {
			return &exitError{code: 2, err: err}
		}
	}

	dst, done, err := exportOutput(*out, stdout)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	w := &lineCounter{w: dst}
	switch {
	case q.server != "":
		err = exportFromAPI(ctx, &q, cq, w)
	case calllogs.InUse(q.dataDir):
		err = exportFromLogs(ctx, q.dataDir, cq, w)
	default:
		err = exportFromFile(ctx, path, cq, w)
	}
	if err = done(err); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("export: %w (%d calls written before it)", err, w.lines)}
	}
	fmt.Fprintln(stderr, exportCounted(w.lines))
	return nil
}

// exportCounted is the count export prints on standard error.
func exportCounted(n int) string {
	if n == 1 {
		return "1 call exported"
	}
	return fmt.Sprintf("%d calls exported", n)
}

// exportFromFile writes the calls of the store file at path that q
// selects, read-only from one snapshot (sqlite.ReadCalls).
func exportFromFile(ctx context.Context, path string, q audit.CallQuery, w io.Writer) error {
	var line []byte
	return sqlite.ReadCalls(ctx, path, q, func(r *audit.Record) error {
		var err error
		if line, err = capture.AppendRecord(line[:0], r); err != nil {
			return err
		}
		_, err = w.Write(line)
		return err
	})
}

// exportFromLogs writes to w the calls q selects of a data dir whose calls
// are in call logs, read beside a running serve (openReading), page by
// page as serve's export reads them.
func exportFromLogs(ctx context.Context, dataDir string, q audit.CallQuery, w io.Writer) (err error) {
	st, err := openReading(dataDir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := st.Close(); err == nil {
			err = cerr
		}
	}()
	var line []byte
	q.Limit = store.MaxPage
	for {
		page, err := st.Calls(ctx, q)
		if err != nil {
			return err
		}
		for i := range page.Calls {
			if line, err = capture.AppendRecord(line[:0], &page.Calls[i]); err != nil {
				return err
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		q.Cursor = page.NextCursor
	}
}

// exportFromAPI copies serve's export of the calls q selects
// (/api/v1/calls/export) to w. serve aborts an export its store fails in
// the middle of: the body breaks off, and the copy fails.
func exportFromAPI(ctx context.Context, qf *queryFlags, q audit.CallQuery, w io.Writer) error {
	params := url.Values{}
	for k, v := range map[string]string{"server": q.Server, "session": q.Session, "tenant": q.Tenant} {
		if v != "" {
			params.Set(k, v)
		}
	}
	for k, t := range map[string]time.Time{"since": q.Since, "until": q.Until} {
		if !t.IsZero() {
			params.Set(k, t.UTC().Format(time.RFC3339Nano))
		}
	}
	u := strings.TrimRight(qf.server, "/") + "/api/v1/calls/export"
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	if qf.token != "" {
		req.Header.Set("Authorization", "Bearer "+qf.token)
	}
	// No bound on the whole answer: it is as long as the range is large.
	client, err := qf.tls.httpClient(0)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", qf.server, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return apiError(resp, b)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("the export from %s broke off: %w", qf.server, err)
	}
	return nil
}

// exportOutput returns where export writes: standard output, or a
// temporary file beside name that done renames to name when the export
// succeeded (and removes otherwise), so that a file of that name is always
// a whole export. done returns the export's error, or the output's.
func exportOutput(name string, stdout io.Writer) (io.Writer, func(error) error, error) {
	if name == "" {
		bw := bufio.NewWriterSize(stdout, 1<<16)
		return bw, func(err error) error {
			if ferr := bw.Flush(); err == nil && ferr != nil {
				err = fmt.Errorf("cannot write the records: %w", ferr)
			}
			return err
		}, nil
	}
	if _, err := os.Lstat(name); err == nil {
		return nil, nil, fmt.Errorf("export: --out %s exists; give a new file", name)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("export: --out: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.tmp")
	if err != nil {
		return nil, nil, fmt.Errorf("export: --out: %w", err)
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	return bw, func(err error) error {
		if err == nil {
			err = bw.Flush()
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			// A link, not a rename: it fails if name appeared meanwhile.
			if err = os.Link(f.Name(), name); err != nil {
				err = fmt.Errorf("cannot write %s: %w", name, err)
			}
		}
		os.Remove(f.Name())
		return err
	}, nil
}

// lineCounter counts the lines written through it.
type lineCounter struct {
	w     io.Writer
	lines int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.lines += bytes.Count(p[:n], []byte{'\n'})
	return n, err
}
