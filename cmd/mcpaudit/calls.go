package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mcpaudit/mcpaudit/audit"
)

// maxCallPage is the most calls the API answers on one page.
const maxCallPage = 1000

// callsCommand lists stored calls through /api/v1/calls, following
// next_cursor until the last page or --limit calls: one line per call, a
// table in text and the API's call object per line in JSON. The count goes
// to standard error, so that standard output holds only the calls.
func callsCommand(args []string, stdout, stderr io.Writer) error {
	filters := map[string]*string{}
	var limit *int
	q, _, err := parseQueryFlags("calls", args, stderr, "calls [flags]", func(fs *flag.FlagSet) {
		filters["server"] = fs.String("mcp-server", "", "MCP server name (default: every server)")
		filters["session"] = fs.String("session", "", "MCP session id (mcp.session.id)")
		filters["source"] = fs.String("source", "", "only calls that came on this sender, as status names it (otlp:thegram/pod-b/node-2, calls:proxy/thegram/host:8080)")
		filters["document"] = fs.String("document", "", "only calls that read or wrote this document (exact)")
		filters["since"] = fs.String("since", "", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now (1h, 7d)")
		filters["tenant"] = fs.String("tenant", "", "only this tenant's calls, for a credential of every tenant (*); without it such a credential lists every tenant's, with a TENANT column")
		filters["until"] = fs.String("until", "", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now")
		limit = fs.Int("limit", 0, "print at most `N` calls, over as many pages as it takes, 0 or more (default 0: every call)")
	})
	if err != nil {
		return quietHelp(err)
	}
	if len(q.positional) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("calls: unexpected argument %q", q.positional[0])}
	}
	if *limit < 0 {
		return &exitError{code: 2, err: fmt.Errorf("calls: --limit must not be negative")}
	}
	// A listing asks once a page: the data dir's store is opened once.
	done, err := q.keepOpen()
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer done()
	params := url.Values{}
	for k, v := range filters {
		if *v != "" {
			params.Set(k, *v)
		}
	}
	out := printable(stdout)
	var tw *tabwriter.Writer
	if q.format == "text" {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	}
	// The TENANT column is decided by the first page (tenantHead): a
	// listing is printed a page at a time.
	tenants, headed := false, false
	n, more := 0, false
	for {
		size := maxCallPage
		if *limit > 0 {
			size = min(size, *limit-n)
		}
		params.Set("limit", strconv.Itoa(size))
		b, err := q.get("/api/v1/calls", params)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		var page struct {
			Calls      []json.RawMessage `json:"calls"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("calls: cannot read the answer: %w", err)}
		}
		if tw != nil && !headed {
			headed = true
			for _, raw := range page.Calls {
				var e struct {
					Tenant string `json:"tenant"`
				}
				if json.Unmarshal(raw, &e) == nil && e.Tenant != "" {
					tenants = *filters["tenant"] == ""
					break
				}
			}
			fmt.Fprintln(tw, tenantHead(tenants)+"TIME (UTC)\tCALL\tSERVER\tSESSION\tTOOL\tOUTCOME / CODE\tRETRY ACTION\tSOURCE")
		}
		for _, raw := range page.Calls {
			if q.format == "json" {
				// The API's bytes, as findings --format json prints them.
				stdout.Write(append(raw, '\n'))
				continue
			}
			var e audit.TimelineEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				return &exitError{code: 2, err: fmt.Errorf("calls: cannot read a call: %w", err)}
			}
			// The sender goes last: its name is the longest and the
			// least often read.
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tenantCell(tenants, e.Tenant), e.Time.UTC().Format("2006-01-02 15:04:05.000"), cell(e.CallID),
				cell(e.Server), cell(e.Session), cell(e.Tool), cell(outcomeCode(e.Outcome, e.Code)), e.RetryAction, cell(e.Source))
		}
		n += len(page.Calls)
		if tw != nil {
			// A page at a time: a listing of every call is not held in memory.
			tw.Flush()
		}
		if page.NextCursor == "" {
			break
		}
		if *limit > 0 && n >= *limit {
			more = true
			break
		}
		params.Set("cursor", page.NextCursor)
	}
	fmt.Fprintln(stderr, callsCounted(n, *limit, more))
	if src := *filters["source"]; n == 0 && src != "" && !strings.HasPrefix(src, "calls:") && !strings.HasPrefix(src, "otlp:") {
		// A relay logs its name (proxy/...) as status and the calls name it
		// since op19b; before, it logged it without the carrier.
		fmt.Fprintf(printable(stderr), "mcpaudit calls: a source is named as status and the calls name it, with how it sends: calls:%s for a poster (proxy, wrap, relay), otlp:%s for an OTLP exporter; names match exactly\n", src, src)
	}
	return nil
}

// callsCounted is the count mcpaudit calls prints on standard error: "1
// call" (not "1 calls", op20's D5), "2345 calls", and with more left after
// --limit, "1500 calls (--limit 1500; more follow)".
func callsCounted(n, limit int, more bool) string {
	s := fmt.Sprintf("%d calls", n)
	if n == 1 {
		s = "1 call"
	}
	if more {
		s += fmt.Sprintf(" (--limit %d; more follow)", limit)
	}
	return s
}
