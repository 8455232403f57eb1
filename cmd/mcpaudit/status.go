package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// statusCommand prints where event time stands in a running collector:
// per partition its watermark, lag and waiting calls, and per source its
// clock; with --wait, it waits until everything acknowledged was judged.
func statusCommand(args []string, stdout, stderr io.Writer) error {
	var server string
	var wait time.Duration
	q, _, err := parseQueryFlags("status", args, stderr, "status --api-url URL [flags]", func(fs *flag.FlagSet) {
		fs.StringVar(&server, "mcp-server", "", "only the partitions of this MCP server")
		fs.DurationVar(&wait, "wait", 0, "wait up to this long until every acknowledged call was judged (exit 1 if not)")
	})
	if err != nil {
		return quietHelp(err)
	}
	if q.server == "" {
		return &exitError{code: 2, err: errors.New("status: needs --api-url: the event-time status is a running collector's")}
	}
	params := url.Values{}
	if server != "" {
		params.Set("server", server)
	}
	deadline := time.Now().Add(wait)
	var st api.StatusResponse
	for {
		b, err := q.get("/api/v1/status", params)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("status: %w", err)}
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("status: cannot read the answer: %w", err)}
		}
		if wait == 0 || st.Judged || time.Now().After(deadline) {
			if q.format == "json" {
				stdout.Write(b)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if q.format == "text" {
		printStatus(stdout, st)
	}
	if wait > 0 && !st.Judged {
		return &exitError{code: 1, err: fmt.Errorf("status: not every acknowledged call was judged within %s", wait)}
	}
	return nil
}

func printStatus(w io.Writer, st api.StatusResponse) {
	judged := "yes"
	if !st.Judged {
		judged = "no"
	}
	fmt.Fprintf(w, "At %s: %d calls queued; everything acknowledged judged: %s\n\n", st.Time.UTC().Format(time.RFC3339), st.Queued, judged)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSERVER\tWATERMARK\tLAG\tWAITING\tLATE\tTOO LATE\tAHEAD\tHELD BY")
	for _, p := range st.Partitions {
		wm, lag := "-", "-"
		if p.Watermark != nil {
			wm = p.Watermark.UTC().Format(time.RFC3339Nano)
			lag = (time.Duration(*p.LagSeconds * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", orDash(p.Tenant), p.Server, wm, lag, p.Buffered, p.Late, p.TooLate, p.Ahead, orDash(p.HeldBy))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSERVER\tLAST EVENT\tLAG\tSTATE\tCALLS\tLATE\tAHEAD")
	for _, p := range st.Partitions {
		for _, s := range p.Sources {
			state := "active"
			if s.Idle {
				state = "idle"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Name, p.Server, s.LastEvent.UTC().Format(time.RFC3339Nano),
				time.Duration(s.LagSeconds*float64(time.Second)).Round(time.Millisecond), state, s.Calls, s.Late, s.Ahead)
		}
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
