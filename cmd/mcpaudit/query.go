package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/classify"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/exporter/store"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/report"
)

// queryFlags are the flags every query command shares: where to ask, and
// how to print.
type queryFlags struct {
	server, dataDir, format, token string
	positional                     []string
	tls                            clientFlags
	// local, when set by keepOpen, answers for the data dir with its store
	// opened once, for a command that asks many times.
	local http.Handler
	// stderr is the command's standard error, for what it says besides
	// its answer.
	stderr io.Writer
}

// keepOpen opens the data dir's store for every later get, when there is
// no --api-url; the returned function closes it.
func (q *queryFlags) keepOpen() (func(), error) {
	if q.server != "" {
		return func() {}, nil
	}
	path := filepath.Join(q.dataDir, storeFile)
	if err := storeExists(q.dataDir, path); err != nil {
		return nil, err
	}
	st, err := openReading(q.dataDir)
	if err != nil {
		return nil, err
	}
	srv := api.New(st, NewDefaultConfig().Serve.SLOTarget)
	// The downtimes serve keeps are in its state file, beside the store:
	// read when a timeline asks for them, so that it marks them as it
	// does through serve's API.
	srv.Downtimes = q.keptDowntimes
	q.local = srv.Handler()
	return func() { q.local = nil; st.Close() }, nil
}

// openReading opens the embedded store of dataDir to read it beside a
// running serve, with its calls where the data dir has them
// (serve.sqlite.calls: auto, whatever serve's config says): in its call
// logs, opened read-only (calllog.Options.ReadOnly: nothing cut or
// written, the calls synced before the open read, a block being written
// left out), or in its calls table. A data dir whose table and logs both
// hold calls is refused (sqlite.ErrCallsInBoth), as serve refuses it.
func openReading(dataDir string) (*sqlite.Store, error) {
	path := filepath.Join(dataDir, storeFile)
	o := sqlite.NewDefaultOptions()
	logs, err := calllogs.Open(calllogs.Dir(dataDir), calllog.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("cannot open the data dir %s: %w", dataDir, err)
	}
	o.Calls, o.CallLog = sqlite.CallsAuto, logs
	st, err := sqlite.Open(path, o)
	if err != nil {
		logs.Close()
		return nil, fmt.Errorf("cannot open the data dir %s: %w", dataDir, err)
	}
	return st, nil
}

// keptDowntimes returns the downtimes the data dir's state file keeps
// (pipeline.ReadDowntimes). One it cannot read is said on stderr and
// taken as none: the answer is still right about what the store holds.
func (q *queryFlags) keptDowntimes() []audit.Downtime {
	// The embedded store's state file is partitions.json, unless serve
	// ran on another store since: then it waits under its own name.
	path := filepath.Join(q.dataDir, stateFile)
	if owner, _, err := pipeline.StateStore(path); err == nil && owner != "" && owner != "sqlite" {
		path = filepath.Join(q.dataDir, parkedStateFile("sqlite"))
	}
	ds, err := pipeline.ReadDowntimes(path)
	if err != nil && q.stderr != nil {
		fmt.Fprintf(q.stderr, "mcpaudit: the times serve was down are not marked: %v\n", err)
	}
	return ds
}

// storeExists fails, saying what to do, when the data dir holds no store
// at path: a command that reads must not create one (an empty store would
// answer every question with nothing).
func storeExists(dataDir, path string) error {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no store in the data dir %s (%s does not exist): give the data dir of mcpaudit serve with --data-dir, or ask a running serve with --api-url", dataDir, filepath.Base(path))
	}
	if err != nil {
		return fmt.Errorf("cannot open the data dir %s: %w", dataDir, err)
	}
	return nil
}

func (q *queryFlags) register(fs *flag.FlagSet, apiOnly bool) {
	if apiOnly {
		fs.StringVar(&q.server, "api-url", "", "URL of the running mcpaudit serve API to ask (e.g. http://localhost:9464); required")
	} else {
		fs.StringVar(&q.server, "api-url", "", "URL of a running mcpaudit serve API (e.g. http://localhost:9464); without it the data dir is read directly")
	}
	fs.StringVar(&q.server, "server", "", "deprecated: use --api-url")
	if !apiOnly {
		fs.StringVar(&q.dataDir, "data-dir", "./mcpaudit-data", "data dir of the embedded store, read when --api-url is not given")
	}
	fs.StringVar(&q.format, "format", "text", "text or json")
	fs.StringVar(&q.token, "token", os.Getenv("MCPAUDIT_TOKEN"), "bearer token for --api-url, needed when the server has any credential configured (default $MCPAUDIT_TOKEN)")
	q.tls.register(fs)
}

// client returns the HTTP client of --api-url.
func (q *queryFlags) client() (*http.Client, error) {
	return q.tls.httpClient(time.Minute)
}

// get performs one API request, against the server or the data dir.
func (q *queryFlags) get(path string, params url.Values) ([]byte, error) {
	u := path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	if q.server != "" {
		req, err := http.NewRequest("GET", strings.TrimRight(q.server, "/")+u, nil)
		if err != nil {
			return nil, err
		}
		if q.token != "" {
			req.Header.Set("Authorization", "Bearer "+q.token)
		}
		client, err := q.client()
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("cannot reach %s: %w", q.server, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, apiError(resp, b)
		}
		return b, nil
	}
	h := q.local
	if h == nil {
		done, err := q.keepOpen()
		if err != nil {
			return nil, err
		}
		defer done()
		h = q.local
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", u, nil))
	if rec.Code != http.StatusOK {
		return nil, errors.New(apiMessage(rec.Body.Bytes()))
	}
	return rec.Body.Bytes(), nil
}

// apiOnly names the query commands that only ask a running serve: what
// they show is in its memory, not in the data dir (no --data-dir).
var apiOnly = map[string]bool{"status": true}

// queryAbout says what each query command does, in its help between the
// usage and the flags.
var queryAbout = map[string]string{
	"findings": "Lists findings, from a running serve (--api-url) or a data dir, filtered by the flags below.\n" +
		"ack, resolve and reopen change a finding's lifecycle state, with a note kept in its audit\n" +
		"trail ('mcpaudit findings ack -h').",
	"findings ack": "Acknowledges a finding: someone is looking at it. The note and who are kept in the\n" +
		"finding's audit trail (the page's /findings/ID).",
	"findings resolve": "Resolves a finding: it was dealt with. The note and who are kept in the finding's\n" +
		"audit trail (the page's /findings/ID).",
	"findings reopen": "Reopens an acknowledged or resolved finding. The note and who are kept in the\n" +
		"finding's audit trail (the page's /findings/ID).",
	"timeline": "Shows every call, write state and finding on one document, in time order (the page's\n" +
		"/documents/DOCUMENT), each call with the document's revision and content hash it expected and\n" +
		"was answered (REVISION, HASH: before → after). The name matches exactly.",
	"calls": "Lists stored calls in time order, one a line (the count on standard error), filtered by\n" +
		"server, session, document and time.",
	"slo": "Shows the write-durability SLI over a window back from now (or from --until), the error\n" +
		"budget left, and the writes by state. Writes count at their calls' event time.",
	"status": "Shows where event time stands per partition (tenant and server), its lag and waiting\n" +
		"calls, which source holds it back, and how many judged writes are still pending (their state\n" +
		"may change until their verification window ends); --wait waits until every call acknowledged\n" +
		"before the wait began was judged (its writes may still be pending).",
}

// parseQueryFlags parses the flags of the query command name; usage is its
// usage line after "mcpaudit ", and its help says queryAbout[name].
func parseQueryFlags(name string, args []string, stderr io.Writer, usage string, extra func(fs *flag.FlagSet)) (*queryFlags, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mcpaudit %s\n\n%s\n\nflags:\n", usage, queryAbout[name])
		fs.PrintDefaults()
	}
	q := &queryFlags{stderr: stderr}
	q.register(fs, apiOnly[name])
	extra(fs)
	usedServer := false
	// Flags may follow the positional arguments: mcpaudit timeline DOC --server URL.
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, nil, flag.ErrHelp
			}
			return nil, nil, &exitError{code: 2}
		}
		fs.Visit(func(f *flag.Flag) { usedServer = usedServer || f.Name == "server" })
		if fs.NArg() == 0 {
			break
		}
		q.positional = append(q.positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if usedServer {
		// proxy and wrap take --server as the MCP server's name, and the
		// alerts label it server: a name here is a filter meant for
		// --mcp-server, never an address (it has no scheme), and it would
		// otherwise replace --api-url and fail as "unsupported protocol scheme".
		if q.server != "" && !strings.Contains(q.server, "://") {
			return nil, nil, &exitError{code: 2, err: fmt.Errorf("%s: --server %q is not a URL: --server is the deprecated name of --api-url (http://HOST:9464); to keep to one MCP server, use --mcp-server %s", name, q.server, q.server)}
		}
		fmt.Fprintf(stderr, "mcpaudit %s: --server is deprecated and will be removed; use --api-url (--mcp-server names an MCP server)\n", name)
	}
	if q.format != "text" && q.format != "json" {
		return nil, nil, &exitError{code: 2, err: fmt.Errorf("%s: --format must be text or json", name)}
	}
	return q, fs, nil
}

func findingsCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if _, ok := api.Actions[args[0]]; ok {
			return findingChangeCommand(args[0], args[1:], stdout, stderr)
		}
	}
	filters := map[string]*string{}
	var limit *int
	q, _, err := parseQueryFlags("findings", args, stderr, "findings [flags]\n       mcpaudit findings ack|resolve|reopen [flags] FINDING-ID --note TEXT", func(fs *flag.FlagSet) {
		limit = fs.Int("limit", store.DefaultPage, fmt.Sprintf("print at most `N` findings, one page (the next with --cursor), 1 to %d", store.MaxPage))
		for _, f := range []struct{ name, help string }{
			{"kind", "finding kind: " + kindList()}, {"severity", "this severity or higher: info, warning or critical"}, {"server", ""},
			{"document", "document path or id the finding is about (exact)"}, {"key", "idempotency key (requestId, operationId, creationId)"},
			{"session", "MCP session id (mcp.session.id)"},
			{"since", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now (1h, 7d)"}, {"until", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now"},
			{"cursor", "page cursor from a previous answer"},
			{"tenant", "only this tenant's findings, for a credential of every tenant (*); without it such a credential lists every tenant's, with a TENANT column"},
			{"state", "lifecycle state: " + stateList() + " (withdrawn: taken back by mcpaudit, listed only when asked for)"}, {"order", "time (default) or newest"},
		} {
			name := f.name
			if name == "server" {
				filters["server"] = fs.String("mcp-server", "", "MCP server name, as the configuration names it (default: every server)")
				continue
			}
			filters[name] = fs.String(name, "", f.help)
		}
	})
	if err != nil {
		return quietHelp(err)
	}
	if len(q.positional) > 0 {
		if a := q.positional[0]; a == "ack" || a == "resolve" || a == "reopen" {
			// The subcommand came after a flag: mcpaudit findings --api-url URL ack ID.
			return &exitError{code: 2, err: fmt.Errorf("findings: unexpected argument %q: put %s right after findings (mcpaudit findings %s [flags] FINDING-ID --note TEXT)", a, a, a)}
		}
		return &exitError{code: 2, err: fmt.Errorf("findings: unexpected argument %q", q.positional[0])}
	}
	if *limit < 1 || *limit > store.MaxPage {
		return &exitError{code: 2, err: fmt.Errorf("findings: --limit %d: want 1 to %d", *limit, store.MaxPage)}
	}
	params := url.Values{}
	for k, v := range filters {
		if *v != "" {
			params.Set(k, *v)
		}
	}
	if *limit != store.DefaultPage {
		params.Set("limit", strconv.Itoa(*limit))
	}
	b, err := q.get("/api/v1/findings", params)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var page audit.FindingPage
	if err := json.Unmarshal(b, &page); err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(page.Findings) == 0 && *filters["cursor"] == "" && (*filters["since"] != "" || *filters["until"] != "") {
		// "What happened at 14:02?" asked of the findings: one dated
		// before the range (by its first evidence call) whose later call
		// is in it is not listed (nop48).
		fmt.Fprintln(stderr, "mcpaudit findings: none dated in the range: a finding is dated by its first evidence call, so one that began before --since is not listed even when a later call of it is in the range; mcpaudit calls --since ... --until ... lists the range's calls, and mcpaudit timeline DOC --since ... --until ... names the findings they are evidence of")
	}
	if doc := *filters["document"]; doc != "" && len(page.Findings) == 0 {
		q.hintUnknownDocument(stderr, "findings", doc)
	}
	if q.format == "json" {
		stdout.Write(b)
		return nil
	}
	tw := tabwriter.NewWriter(printable(stdout), 0, 0, 2, ' ', 0)
	tenants := *filters["tenant"] == "" && slices.ContainsFunc(page.Findings, func(f audit.Finding) bool { return f.Tenant != "" })
	fmt.Fprintln(tw, tenantHead(tenants)+"TIME (UTC)\tID\tSEVERITY\tKIND\tSTATE\tSERVER\tDOCUMENT / KEY\tSUMMARY")
	for _, f := range page.Findings {
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tenantCell(tenants, f.Tenant), f.Time.UTC().Format("2006-01-02 15:04:05"), f.ID(), f.Severity, f.Kind, f.StateOf(), cell(f.Server), cell(joinNonEmpty(f.Document, f.Key)), cell(f.Summary))
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(stdout, "\nmore: --cursor %s\n", page.NextCursor)
	}
	return nil
}

func timelineCommand(args []string, stdout, stderr io.Writer) error {
	var mcpServer, since, until, tenant *string
	var limit *int
	q, _, err := parseQueryFlags("timeline", args, stderr, "timeline [flags] DOCUMENT", func(fs *flag.FlagSet) {
		mcpServer = fs.String("mcp-server", "", "MCP server name (default: every server)")
		tenant = fs.String("tenant", "", "only this tenant's document, for a credential of every tenant (*); without it such a credential sees every tenant's document of that name, with a TENANT column")
		since = fs.String("since", "", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now")
		until = fs.String("until", "", "RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now")
		limit = fs.Int("limit", store.DefaultTimeline, fmt.Sprintf("print at most `N` events, the earliest of the range, 1 to %d", store.MaxTimeline))
	})
	if err != nil {
		return quietHelp(err)
	}
	if *limit < 1 || *limit > store.MaxTimeline {
		return &exitError{code: 2, err: fmt.Errorf("timeline: --limit %d: want 1 to %d", *limit, store.MaxTimeline)}
	}
	if len(q.positional) != 1 || q.positional[0] == "" {
		return &exitError{code: 2, err: errors.New("timeline: name one document")}
	}
	doc := q.positional[0]
	params := url.Values{}
	for k, v := range map[string]string{"server": *mcpServer, "since": *since, "until": *until, "tenant": *tenant} {
		if v != "" {
			params.Set(k, v)
		}
	}
	if *limit != store.DefaultTimeline {
		params.Set("limit", strconv.Itoa(*limit))
	}
	path := "/api/v1/documents/" + url.PathEscape(doc) + "/timeline"
	if doc == "." || doc == ".." {
		// As a path segment, even escaped as %2E, a proxy or client between
		// here and serve that resolves dot segments would send
		// /api/v1/timeline or /api/v1/documents/timeline: the query form
		// carries the name as it is.
		path = "/api/v1/documents/timeline"
		params.Set("name", doc)
	}
	b, err := q.get(path, params)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var tl api.Timeline
	if err := json.Unmarshal(b, &tl); err != nil {
		return &exitError{code: 2, err: err}
	}
	if len(tl.Events) == 0 {
		q.hintUnknownDocument(stderr, "timeline", doc)
	}
	if tl.Truncated {
		defer truncatedNote(stderr, len(tl.Events), *limit, tl.NextSince)
	}
	if *since != "" || *until != "" {
		defer q.noteFindingsOutside(stderr, doc, params, tl)
	}
	if q.format == "json" {
		stdout.Write(b)
		return nil
	}
	out := printable(stdout)
	// A document is a server's: two servers (two vaults, or two exporters
	// of one) may hold a document of one path. Rows of more than one
	// server name theirs (op23's D2: they read as duplicates).
	servers := timelineServers(tl.Events)
	manyServers := *mcpServer == "" && len(servers) > 1
	fmt.Fprintf(out, "Timeline of %s%s (%s)\n", tl.Document, onServers(*mcpServer, servers), timelineCount(len(tl.Events), len(tl.Downtimes)))
	if manyServers {
		fmt.Fprintf(stderr, "mcpaudit timeline: %d servers hold a document named %q; each row names its SERVER (--mcp-server NAME shows one server's)\n", len(servers), doc)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	// ID is the call's id (a call and its write), as calls prints it and
	// /api/v1/calls/{id} takes it, or the finding's, as findings prints it.
	// REVISION and HASH are a call's, before → after, as the page shows
	// them: what it expected of the document and what it was answered.
	tenants := *tenant == "" && slices.ContainsFunc(tl.Events, func(e audit.TimelineEvent) bool { return e.Tenant != "" })
	fmt.Fprintln(tw, tenantHead(tenants)+serverHead(manyServers)+"TIME (UTC)\tID\tEVENT\tSESSION\tTOOL\tREVISION\tHASH\tWHAT\tRETRY ACTION")
	// A time serve was down is a line of its own, before the first event
	// after it began (EVENT "down"): events of that time may be missing.
	downs := tl.Downtimes
	down := func(before time.Time) {
		for len(downs) > 0 && (before.IsZero() || before.After(downs[0].From)) {
			d := downs[0]
			downs = downs[1:]
			fmt.Fprintf(tw, "%s%s%s\t-\tdown\t-\t-\t-\t-\t%s\t\n", tenantCell(tenants, "-"), serverCell(manyServers, "-"), d.From.UTC().Format("2006-01-02 15:04:05.000"), cell(d.Note))
		}
	}
	for _, e := range tl.Events {
		down(e.Time)
		what, id, rev, hash := "", e.CallID, "", ""
		switch e.Type {
		case audit.EventCall:
			what = outcomeCode(e.Outcome, e.Code)
			rev, hash = beforeAfter(e.RevisionBefore, e.RevisionAfter), beforeAfter(e.HashBefore, e.HashAfter)
		case audit.EventWrite:
			what = joinNonEmpty("state "+string(e.State), string(e.Reason), e.Key)
		case audit.EventFinding:
			if e.Finding != nil {
				what, id = string(e.Finding.Kind)+": "+e.Finding.Summary, e.Finding.ID()
			}
		}
		fmt.Fprintf(tw, "%s%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tenantCell(tenants, e.Tenant), serverCell(manyServers, e.Server), e.Time.UTC().Format("2006-01-02 15:04:05.000"), cell(id), e.Type,
			cell(e.Session), cell(e.Tool), cell(rev), cell(hash), cell(what), e.RetryAction)
	}
	down(time.Time{})
	return tw.Flush()
}

// noteFindingsOutside tells stderr about the findings on doc that a
// timeline narrowed by --since or --until leaves out, as the page's
// "more findings fall outside the range" line does: a finding is dated by
// its first evidence call, so a range around a later one (the second
// application of a double-applied write) shows that call and its write
// state without the finding (nop48: "what happened at 14:02?" showed
// "state double_applied" and no finding). Each left-out finding a call
// shown is evidence of is named with that call; the others are counted.
// When the check itself fails it says nothing: the timeline is still right.
func (q *queryFlags) noteFindingsOutside(stderr io.Writer, doc string, timeline url.Values, tl api.Timeline) {
	params := url.Values{"document": {doc}, "limit": {strconv.Itoa(store.MaxPage)}}
	for _, k := range []string{"server", "tenant"} {
		if v := timeline.Get(k); v != "" {
			params.Set(k, v)
		}
	}
	b, err := q.get("/api/v1/findings", params)
	if err != nil {
		return
	}
	var page audit.FindingPage
	if json.Unmarshal(b, &page) != nil {
		return
	}
	shown, calls := map[string]bool{}, map[string]bool{}
	for _, e := range tl.Events {
		switch {
		case e.Type == audit.EventFinding && e.Finding != nil:
			shown[e.Finding.ID()] = true
		case e.Type == audit.EventCall:
			calls[e.CallID] = true
		}
	}
	out := printable(stderr)
	more := 0
	for i := range page.Findings {
		f := &page.Findings[i]
		if shown[f.ID()] {
			continue
		}
		if tl.Truncated && len(tl.Events) > 0 && !f.Time.Before(tl.Events[0].Time) {
			// In the range, past the events this answer holds: the
			// truncation note says how to read on.
			continue
		}
		if i := slices.IndexFunc(f.Calls, func(c string) bool { return calls[c] }); i >= 0 {
			fmt.Fprintf(out, "mcpaudit timeline: call %s in the range is evidence of finding %s (%s, %s), dated %s UTC by its first evidence call, outside the range: mcpaudit findings --document %s lists it\n",
				f.Calls[i], f.ID(), f.Kind, f.StateOf(), f.Time.UTC().Format("2006-01-02 15:04:05.000"), shellWord(doc))
			continue
		}
		more++
	}
	if more > 0 && !tl.Truncated {
		s := "findings on this document fall"
		if more == 1 {
			s = "finding on this document falls"
		}
		fmt.Fprintf(out, "mcpaudit timeline: %d more %s outside the range: mcpaudit findings --document %s lists every one\n", more, s, shellWord(doc))
	}
}

// timelineServers returns the servers the events name, sorted.
func timelineServers(events []audit.TimelineEvent) []string {
	var out []string
	for _, e := range events {
		if e.Server != "" && !slices.Contains(out, e.Server) {
			out = append(out, e.Server)
		}
	}
	slices.Sort(out)
	return out
}

// onServers says in a timeline's title whose document it is: the server
// --mcp-server keeps, or the servers of the rows when more than one holds
// a document of the name.
func onServers(kept string, servers []string) string {
	switch {
	case kept != "":
		return " on " + nameCell(kept)
	case len(servers) > 1:
		names := make([]string, len(servers))
		for i, s := range servers {
			names[i] = nameCell(s)
		}
		return fmt.Sprintf(" on %d servers: %s", len(servers), strings.Join(names, ", "))
	}
	return ""
}

// timelineCount is the count in a timeline's title: its events, and the
// rows that mark a time serve was down when there are any, so that the
// count adds up to the rows printed (op23's D6).
func timelineCount(events, downs int) string {
	if downs == 0 {
		return fmt.Sprintf("%d events", events)
	}
	times := "times"
	if downs == 1 {
		times = "time"
	}
	return fmt.Sprintf("%d rows: %d events and %d %s serve was down", events+downs, events, downs, times)
}

// serverHead and serverCell make a timeline's SERVER column, shown when
// its rows are of more than one server and --mcp-server keeps none.
func serverHead(shown bool) string {
	if !shown {
		return ""
	}
	return "SERVER\t"
}

func serverCell(shown bool, server string) string {
	if !shown {
		return ""
	}
	return nameCell(cmp.Or(server, "-")) + "\t"
}

// tenantHead and tenantCell make the TENANT column the tables of findings,
// calls and timeline begin with when shown (op21's D4): when the rows
// name a tenant and --tenant does not keep one. A credential of every
// tenant (*) then tells two tenants' rows of one document or session
// apart; a credential of one tenant sees its own name in it (the CLI
// cannot tell the credential's reach from the answer); with
// authentication off every row is the empty tenant's and there is no
// column.
func tenantHead(shown bool) string {
	if !shown {
		return ""
	}
	return "TENANT\t"
}

func tenantCell(shown bool, tenant string) string {
	if !shown {
		return ""
	}
	return nameCell(cmp.Or(tenant, "-")) + "\t"
}

// cellEscapes writes a table cell's line breaks and tabs as escapes.
var cellEscapes = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`)

// cell returns text a sender chose (a session, a tool, a revision or hash
// from the payloads, a key) fit for one cell of a table: a line break
// would forge a line of it, a tab shift its columns (printable lets both
// through, as the table needs them).
// nameShown is how many characters of a name (a tenant, server or source,
// a document) a table cell shows, as the page does; --format json has the
// whole name. A 300-character tenant sized the status tables' columns to
// it and pushed both off the screen (op21's D5).
const nameShown = 60

// nameCell is a name as a table cell: escaped as cell does and cut to
// nameShown characters, the last an ellipsis when cut.
func nameCell(s string) string {
	if r := []rune(s); len(r) > nameShown {
		s = string(r[:nameShown-1]) + "…"
	}
	return cell(s)
}

func cell(s string) string {
	if !strings.ContainsAny(s, "\n\r\t") {
		return s
	}
	return cellEscapes.Replace(s)
}

// beforeAfter prints a call's revision or hash as "before → after", "-"
// standing for a side its payloads do not tell (a read has no before, a
// call without an answer no after), and "-" alone when neither is told.
func beforeAfter(before, after string) string {
	if before == "" && after == "" {
		return "-"
	}
	return cmp.Or(before, "-") + " → " + cmp.Or(after, "-")
}

// truncatedNote tells stderr that a timeline holds more than the n events
// printed, and how to read the rest: from next_since, or with a larger
// limit when one instant holds more events than the limit.
func truncatedNote(stderr io.Writer, n, limit int, next time.Time) {
	events := "events"
	if n == 1 {
		events = "event"
	}
	fmt.Fprintf(stderr, "mcpaudit timeline: stopped after %d %s (--limit %d): the range holds more; "+
		"to see the rest, run it again with --since %s (events of that instant shown already come again)",
		n, events, limit, next.UTC().Format(time.RFC3339Nano))
	if limit < store.MaxTimeline {
		fmt.Fprintf(stderr, " or a larger --limit (at most %d)", store.MaxTimeline)
	}
	fmt.Fprintln(stderr)
}

// hintUnknownDocument tells stderr, when no stored call of the caller's
// tenant names doc, that the name is unknown and that names match exactly,
// as the page's 404 does: the API answers an unknown document with an
// empty list (200, which clients rely on), and an empty list alone reads
// as a quiet document. Called after an empty answer; when the check
// itself fails it says nothing, as the answer printed is still right.
func (q *queryFlags) hintUnknownDocument(stderr io.Writer, cmd, doc string) {
	b, err := q.get("/api/v1/calls", url.Values{"document": {doc}, "limit": {"1"}})
	if err != nil {
		return
	}
	var page struct {
		Calls []json.RawMessage `json:"calls"`
	}
	if json.Unmarshal(b, &page) != nil || len(page.Calls) > 0 {
		return
	}
	fmt.Fprintf(printable(stderr), "mcpaudit %s: no stored call names document %q: names match exactly, case and path separators included (the document's path as its calls give it); mcpaudit calls lists the stored calls and the documents they name\n", cmd, doc)
}

func sloCommand(args []string, stdout, stderr io.Writer) error {
	var window, until, target, mcpServer, failUnder *string
	q, _, err := parseQueryFlags("slo", args, stderr, "slo [flags]", func(fs *flag.FlagSet) {
		window = fs.String("window", "30d", "window back from --until (30d, 7d, 1h)")
		until = fs.String("until", "", "end of the window: RFC 3339 time, the page's \"2026-12-04 14:02\" (UTC), or a duration back from now such as 1d (default now)")
		target = fs.String("target", "", "SLO target, in (0, 1] (default: with --api-url the server's serve.slo_target; with --data-dir 0.999, whatever the configuration says)")
		mcpServer = fs.String("mcp-server", "", "MCP server name (default: every server)")
		failUnder = fs.String("fail-under", "", "exit 1 when the error budget remaining is below this share: 0 fails on an overspent budget, 0.25 or 25% when less than a quarter is left (default: never fail)")
	})
	if err != nil {
		return quietHelp(err)
	}
	if len(q.positional) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("slo: unexpected argument %q", q.positional[0])}
	}
	var floor *float64
	if *failUnder != "" {
		f, err := parseShare(*failUnder)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("slo: --fail-under: %w", err)}
		}
		floor = &f
	}
	params := url.Values{"window": {*window}}
	if *until != "" {
		params.Set("until", *until)
	}
	if *target != "" {
		params.Set("target", *target)
	}
	if *mcpServer != "" {
		params.Set("server", *mcpServer)
	}
	b, err := q.get("/api/v1/slo", params)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var s api.SLO
	if err := json.Unmarshal(b, &s); err != nil {
		return &exitError{code: 2, err: err}
	}
	if q.format == "json" {
		stdout.Write(b)
		return sloVerdict(s, floor)
	}
	of := ""
	if s.Server != "" {
		of = " of " + s.Server
	}
	fmt.Fprintf(stdout, "Write durability SLO%s over %s (%s to %s), target %.4g\n", of, s.Window, s.Since.UTC().Format(time.RFC3339), s.Until.UTC().Format(time.RFC3339), s.Target)
	good := s.Counts[audit.StateDurable] + s.Counts[audit.StateResolved]
	if s.SLI == nil {
		fmt.Fprintln(stdout, "  SLI: n/a (no write counts toward it)")
		// Writes count at their calls' event time: a capture posted from
		// last month, or an incident of last week, lies before a window
		// that ends now (op25: the README's sample gave n/a, and slo had
		// no way to end the window elsewhere, as /slo and report do).
		if st := s.Stored; st != nil {
			// Where they are, as report says it (op47: slo named no
			// time, and the caller had to guess one).
			fmt.Fprintf(stderr, "mcpaudit slo: no write is dated in the %s window ending %s; the stored writes run from %s to %s (a write counts at its call's event time): end the window there with --until %q --window %s\n",
				s.Window, s.Until.UTC().Format("2006-01-02 15:04:05 MST"), st.First.Format("2006-01-02 15:04:05 MST"), st.Last.Format("2006-01-02 15:04:05 MST"), st.Until, st.Window)
		} else if *until == "" {
			fmt.Fprintf(stderr, "mcpaudit slo: no write counts over the %s back from now; writes count at their calls' event time, so for older traffic (a replayed capture, a past incident) end the window there with --until TIME (RFC 3339 or \"2026-12-04 14:02\" UTC)\n", s.Window)
		}
	} else {
		fmt.Fprintf(stdout, "  SLI: %.5f (%d / %d)\n", *s.SLI, good, report.Counted(s.Counts))
	}
	// How it is computed (op23's D10: only the page said it).
	fmt.Fprintf(stdout, "  %s\n", report.Formula)
	if s.ErrorBudgetRemaining != nil {
		fmt.Fprintf(stdout, "  error budget left: %s\n", report.BudgetLeft(*s.ErrorBudgetRemaining, s.Target))
	}
	for _, st := range audit.WriteStates {
		fmt.Fprintf(stdout, "  %-16s %d\n", st, s.Counts[st])
	}
	return sloVerdict(s, floor)
}

// sloVerdict applies --fail-under: exit 1 when the remaining error budget is
// below floor, 2 when there is no budget to judge.
func sloVerdict(s api.SLO, floor *float64) error {
	if floor == nil {
		return nil
	}
	if s.ErrorBudgetRemaining == nil {
		return &exitError{code: 2, err: fmt.Errorf("slo: --fail-under: no write counts toward the SLI over %s, so there is no error budget to judge", s.Window)}
	}
	if *s.ErrorBudgetRemaining < *floor {
		return &exitError{code: 1, err: fmt.Errorf("slo: error budget left %s is below --fail-under %.1f%%", report.BudgetLeft(*s.ErrorBudgetRemaining, s.Target), *floor*100)}
	}
	return nil
}

// parseShare reads a share of the budget: a fraction (0.25) or a
// percentage (25%), at most 1. Below zero is allowed: -1 tolerates a budget
// overspent twice.
func parseShare(v string) (float64, error) {
	pct := strings.HasSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a fraction such as 0.25 or a percentage such as 25%%, not %q", v)
	}
	if pct {
		f /= 100
	}
	if f > 1 {
		return 0, fmt.Errorf("%q is more than the whole budget (1 or 100%%)", v)
	}
	return f, nil
}

// kindList names the finding kinds for help texts.
func kindList() string {
	s := make([]string, len(audit.Kinds))
	for i, k := range audit.Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// stateList names every finding lifecycle state, for help texts: "open,
// acknowledged, resolved or withdrawn".
func stateList() string {
	s := make([]string, len(audit.FindingStates))
	for i, st := range audit.FindingStates {
		s[i] = string(st)
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func quietHelp(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// outcomeCode is a call's outcome and, for a failure, its code, as the
// CLI's tables print them ("no_response / timeout"); a call that saw
// neither a response nor a transport error says so once
// (classify.CodeText) rather than "no_response / no_response".
func outcomeCode(outcome audit.Outcome, code string) string {
	if code == "" {
		return string(outcome)
	}
	return string(outcome) + " / " + classify.CodeText(code)
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " / ")
}

// apiMessage is the message of an API error answer: the "error" of its
// JSON object, or the body as it is when it is not one (a proxy's page).
func apiMessage(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(body))
}

// apiError is the error of an API answer other than 200: the request
// (method and URL: a 404 is often the wrong listener's or host's), its
// status and message, and for 401 how to give a credential.
func apiError(resp *http.Response, body []byte) error {
	msg := apiMessage(body)
	req := ""
	if r := resp.Request; r != nil && r.URL != nil {
		req = r.Method + " " + r.URL.Redacted() + ": "
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("%s%s: %s (give a token with --token or $MCPAUDIT_TOKEN)", req, resp.Status, msg)
	}
	return fmt.Errorf("%s%s: %s", req, resp.Status, msg)
}
