package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// statusCommand prints where event time stands in a running collector:
// per partition its watermark, lag and waiting calls, and per source its
// clock; with --wait, it waits until every call acknowledged before the
// wait began was judged.
func statusCommand(args []string, stdout, stderr io.Writer) error {
	var server string
	var wait time.Duration
	q, _, err := parseQueryFlags("status", args, stderr, "status --api-url URL [flags]", func(fs *flag.FlagSet) {
		fs.StringVar(&server, "mcp-server", "", "only the partitions of this MCP server")
		fs.DurationVar(&wait, "wait", 0, "wait up to this long until every call acknowledged before the wait began was judged (exit 1 if not)")
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
	var targets map[[2]string]time.Time
	done := false
	for {
		b, err := q.get("/api/v1/status", params)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("status: %w", err)}
		}
		st = api.StatusResponse{}
		if err := json.Unmarshal(b, &st); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("status: cannot read the answer: %w", err)}
		}
		var has struct {
			PendingWrites *int `json:"pending_writes"`
		}
		if json.Unmarshal(b, &has) == nil && has.PendingWrites == nil {
			st.PendingWrites = unknownPending // a serve from before the count
		}
		// The collector takes every call acknowledged before a question
		// into its partitions before answering: the first answer's
		// acknowledged event times are what the wait must see judged.
		if targets == nil {
			targets = acknowledged(st)
		}
		done = judgedSince(targets, st)
		if wait == 0 || done || time.Now().After(deadline) {
			if q.format == "json" {
				stdout.Write(b)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if q.format == "text" {
		printStatus(stdout, st, wait > 0 && done)
	}
	if wait > 0 && !done {
		return &exitError{code: 1, err: fmt.Errorf("status: not every call acknowledged before the wait was judged within %s", wait)}
	}
	return nil
}

// acknowledged returns, per partition (tenant, server), the latest event
// time its sources had delivered.
func acknowledged(st api.StatusResponse) map[[2]string]time.Time {
	m := map[[2]string]time.Time{}
	for _, p := range st.Partitions {
		if p.Acknowledged != nil {
			m[[2]string{p.Tenant, p.Server}] = *p.Acknowledged
		}
	}
	return m
}

// judgedSince reports whether everything acknowledged up to targets was
// judged and its output stored: nothing waits at all, or nothing judged
// is left unstored and every partition's watermark has
// reached its target (or the partition is gone: it held nothing). Calls
// acknowledged since may still wait; under steady traffic some always do.
// Calls queued when a status is asked are taken into their partitions
// before the answer, so the queue needs no look.
func judgedSince(targets map[[2]string]time.Time, st api.StatusResponse) bool {
	if st.Judged {
		return true
	}
	if st.Unstored > 0 {
		return false // judged, but not to be read from the store yet
	}
	wms := map[[2]string]*time.Time{}
	for _, p := range st.Partitions {
		wms[[2]string{p.Tenant, p.Server}] = p.Watermark
	}
	for k, t := range targets {
		wm, ok := wms[k]
		if ok && (wm == nil || wm.Before(t)) {
			return false
		}
	}
	return true
}

// unknownPending marks, in PendingWrites, an answer that does not count
// the pending writes (a serve from before the count): none is told.
const unknownPending = -1

// printStatus prints a status answer as tables; waited tells that a wait
// for what was acknowledged before it succeeded.
func printStatus(w io.Writer, st api.StatusResponse, waited bool) {
	w = printable(w)
	judged := api.JudgedValue(st)
	waiting := 0
	for _, p := range st.Partitions {
		waiting += p.Buffered
	}
	// "Judged" is about calls: a judged write may still be pending, and
	// change state later. Said in the same breath, so that "yes" is not
	// read as final.
	// Too late since the start, as the metric counts them: a partition
	// freed as idle has no row below, but its calls stay unjudged (px19).
	freed := ""
	if st.TooLateFreed > 0 {
		freed = fmt.Sprintf(", %d of them in partitions since freed as idle", st.TooLateFreed)
	}
	if st.FreedDropped > 0 {
		freed += fmt.Sprintf("; %d partitions freed the longest ago told together as %s (a server freed again counts again)", st.FreedDropped, detect.OverflowServer)
	}
	// The counts are since the start; the store keeps the calls earlier
	// runs stored too late, said beside them: after a restart "0 too late"
	// alone hid 920 of them (live22's S2).
	before := ""
	if st.TooLateBeforeStart > 0 {
		before = fmt.Sprintf(" since this start, and %d stored too late before it, never judged either (mcpaudit calls lists them)", st.TooLateBeforeStart)
	}
	fmt.Fprintf(w, "At %s: %d calls queued, %d waiting for their watermark, %d too late (stored, never judged%s)%s; %s: %s\n",
		st.Time.UTC().Format(time.RFC3339), st.Queued, waiting, st.TooLate, freed, before, api.JudgedLabel, judged)
	if d := st.LastDowntime; d != nil {
		end := ""
		if d.End != "" {
			end = ", " + d.End
		}
		fmt.Fprintf(w, "Serve was down from %s to %s (%s%s) before it started: calls sent meanwhile arrive only from senders that kept them (an OpenTelemetry SDK otlptracehttp exporter does not retry a refused connection, otlptracegrpc retries for 10 s at most), so findings about them may be missing (docs/runbooks.md#after-serve-was-down; told for %gh after the start).\n",
			d.From.UTC().Format(time.RFC3339), d.To.UTC().Format(time.RFC3339), downtimeLength(*d), end, api.DowntimeShown.Hours())
	}
	if line, ok := downtimesLine(st.Downtimes); ok {
		fmt.Fprintln(w, line)
	}
	switch {
	case st.Store != nil && !st.Store.Ready && st.Store.DiskFull:
		fmt.Fprintf(w, "Store not ready: %s. Calls are refused (503) while the disk has no room for them, and taken again once it has, from senders that retry; nothing acknowledged is lost (/readyz answers 503; docs/runbooks.md#mcpauditstoreunavailable).\n", st.Store.Reason)
	case st.Store != nil && !st.Store.Ready:
		fmt.Fprintf(w, "Store not ready: %s. Calls are still acknowledged while the spool or call log has room, and stored once the store is back; queries may fail or miss them meanwhile (/readyz answers 503; for ClickHouse see docs/clickhouse.md#when-clickhouse-is-down).\n", st.Store.Reason)
	}
	if line, ok := api.OtherStoreLine(st); ok {
		fmt.Fprintln(w, line)
	}
	if line, ok := api.StateFileLine(st); ok {
		fmt.Fprintln(w, line)
	}
	if line, ok := api.PendingLine(st); ok {
		fmt.Fprintln(w, line)
	}
	// A lag is a backlog only when something waits: a quiet partition
	// trails by its last delivery's delay (op20's D4).
	if line, ok := api.BehindLine(st); ok {
		fmt.Fprintln(w, line)
	}
	if st.Unstored > 0 {
		fmt.Fprintf(w, "%d findings and write states are judged but not stored yet: the store refused them, and they are retried.\n", st.Unstored)
	}
	if st.WithdrawalsWaiting > 0 {
		fmt.Fprintf(w, "%d withdrawals of unverified_write findings wait for the store, which refused them: the store shows those findings open until it takes them (retried at every commit; docs/runbooks.md#mcpauditwithdrawalswaiting).\n", st.WithdrawalsWaiting)
	}
	if waited {
		fmt.Fprintln(w, "Everything acknowledged before the wait began is judged, and stored.")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSERVER\tWATERMARK\tLAG\tWAITING\tCALLS\tLATE\tTOO LATE\tAHEAD\tBEHIND\tHELD BY")
	for _, p := range st.Partitions {
		wm, lag := "-", "-"
		if p.Watermark != nil {
			wm = p.Watermark.UTC().Format(time.RFC3339Nano)
			lag = (time.Duration(*p.LagSeconds * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", orDash(nameCell(p.Tenant)), nameCell(p.Server), wm, lag, p.Buffered, p.Calls, p.Late, p.TooLate, p.Ahead, p.Behind, orDash(heldBy(p)))
	}
	tw.Flush()
	fmt.Fprintln(w)
	// A source's clock is per server it feeds; its counts are its own,
	// told once.
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSERVER\tLAST EVENT\tLAG\tSTATE")
	for _, p := range st.Partitions {
		for _, s := range p.Sources {
			state := "active"
			if s.Idle {
				state = "idle"
				// A quiet source that still holds its partition at the lag
				// it delivered with (a slow clock, or one late post of older
				// calls) is what mcpaudit_pipeline_source_lag_seconds exports
				// as state="active" and McpAuditSourceLagging fires on: the
				// table said only "idle" while nothing waited (op25).
				if s.HoldLagSeconds != nil && s.HoldUntil != nil {
					state = fmt.Sprintf("idle, holding at %s until %s",
						time.Duration(*s.HoldLagSeconds*float64(time.Second)).Round(time.Second), s.HoldUntil.UTC().Format(time.RFC3339))
				}
			}
			if s.Overflow {
				state += ", overflow"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", nameCell(s.Name), nameCell(p.Server), s.LastEvent.UTC().Format(time.RFC3339Nano),
				time.Duration(s.LagSeconds*float64(time.Second)).Round(time.Millisecond), state)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSOURCE\tSERVERS\tCALLS\tLATE\tTOO LATE\tAHEAD\tBEHIND")
	for _, s := range st.Sources {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", orDash(nameCell(s.Tenant)), nameCell(s.Name), nameCell(strings.Join(s.Servers, ",")), s.Calls, s.Late, s.TooLate, s.Ahead, s.Behind)
	}
	tw.Flush()
	// Why calls wait for a while after a restart, when no source is
	// behind: the watermarks are held for the senders' backlogs.
	if line, ok := api.RestartHold(st); ok {
		fmt.Fprintln(w)
		fmt.Fprintln(w, line)
	}
	// Why a partition shows no watermark: it has not taken one yet (a new
	// server waits detect.join_wait for its other sources).
	partitionLines(w, st.Partitions, api.NoWatermark)
	// What holds a server's findings back: a source far behind the others
	// of its partition (an exporter that lags, or a clock that is slow)
	// keeps every call of the others waiting for as long as it is behind.
	partitionLines(w, st.Partitions, api.HeldBack)
	// Senders a partition had no room for (detect.max_sources): their
	// calls are judged under one clock, not each under its own.
	first := true
	for _, p := range st.Partitions {
		if p.OverflowCalls == 0 {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintf(w, "Sources overflow: %s%s kept detect.max_sources senders, none quiet: %d calls of new senders were judged under its overflow source (%s), whose clock follows the latest of them; %d quiet senders made room for new ones.\n",
			p.Server, tenantOf(p.Tenant), p.OverflowCalls, detect.OverflowSource, p.SourcesDisplaced)
	}
	// What was not judged, and so which findings may be missing: by
	// source, the span of event time its too-late calls fall in.
	first = true
	for _, s := range st.Sources {
		if s.TooLate == 0 || s.TooLateFrom == nil {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		// The command that lists them names the source (stored calls name
		// their sender), and the server when the source feeds one. The
		// overflow source's calls are stored under their own senders'
		// names: the latest few it names; listed by the sender when it
		// names one alone (no other sent too late), else by server and
		// time.
		name, source := s.Name, s.Name
		if s.Name == detect.OverflowSource {
			source = ""
			if len(s.TooLateSenders) == 1 {
				source = s.TooLateSenders[0]
			}
			for i, n := range s.TooLateSenders {
				if i == 0 {
					name += ", latest senders"
				}
				name += " " + shellWord(n)
			}
		}
		var by []string
		if source != "" {
			by = append(by, "--source "+shellWord(source))
		}
		switch {
		case len(s.Servers) == 1:
			by = append(by, "--mcp-server "+shellWord(s.Servers[0]))
		case source == "":
			by = append(by, "--mcp-server SERVER")
		}
		// A slow clock is told from a backlog delivered late: the fix is
		// the sender's time, not the collector's lateness.
		slow := ""
		if s.Behind > 0 {
			slow = fmt.Sprintf(" %d of them came from a clock behind by more than detect.max_clock_lag: the source never delivered a call dated within it of its arrival (a slow clock; docs/runbooks.md#mcpauditclockbehind).", s.Behind)
		}
		fmt.Fprintf(w, "Not judged: %d calls of %s (%s) dated %s to %s came later than detect.allowed_lateness; findings about them may be missing (listed by mcpaudit calls %s --since %s --until %s).%s\n",
			s.TooLate, name, strings.Join(s.Servers, ","), s.TooLateFrom.UTC().Format(time.RFC3339), s.TooLateTo.UTC().Format(time.RFC3339),
			strings.Join(by, " "), s.TooLateFrom.UTC().Format(time.RFC3339), s.TooLateTo.Add(time.Second).UTC().Format(time.RFC3339), slow)
	}
}

// shellWord returns s as one word of a shell command: as it is when it
// holds only characters no shell reads specially, else single-quoted. "="
// is not among them: zsh expands a word that starts with it ("=ls" is
// the path of ls).
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/:@+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tenantOf names a partition's tenant after its server, when it has one.
func tenantOf(tenant string) string {
	if tenant == "" {
		return ""
	}
	return " (tenant " + tenant + ")"
}

// heldBy is the HELD BY column of partition p: the source its watermark
// waits for, named only while calls wait in it. The API's held_by names
// the source whose clock is the watermark even when nothing waits (every
// source idle, every call judged), where "held by" would say something
// is held back when nothing is.
func heldBy(p api.PartitionStatus) string {
	if p.Buffered == 0 {
		return ""
	}
	return p.HeldBy
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// partitionLines prints the line line gives of each partition that has
// one, after an empty line, or nothing when none has.
func partitionLines(w io.Writer, parts []api.PartitionStatus, line func(api.PartitionStatus) (string, bool)) {
	first := true
	for _, p := range parts {
		l, ok := line(p)
		if !ok {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		fmt.Fprintln(w, l)
	}
}

// downtimeLength is how long d lasted, to the second, as status prints it.
func downtimeLength(d api.Downtime) time.Duration {
	return time.Duration(d.Seconds * float64(time.Second)).Round(time.Second)
}

// downtimesShown is how many of the kept downtimes the status line names.
const downtimesShown = 3

// downtimesLine says how many times serve was down in the history it
// keeps (oldest first in ds), how many of them after a crash, and names
// the latest few; false when none is kept.
func downtimesLine(ds []api.Downtime) (string, bool) {
	if len(ds) == 0 {
		return "", false
	}
	crashes := 0
	for _, d := range ds {
		if d.End == audit.EndCrash {
			crashes++
		}
	}
	var latest []string
	for i := len(ds) - 1; i >= 0 && len(latest) < downtimesShown; i-- {
		d := ds[i]
		latest = append(latest, fmt.Sprintf("%s to %s (%s, %s)", d.From.UTC().Format(time.RFC3339), d.To.UTC().Format(time.RFC3339),
			downtimeLength(d), cmp.Or(d.End, audit.EndUnknown)))
	}
	times := "times"
	if len(ds) == 1 {
		times = "time"
	}
	return fmt.Sprintf("Downtimes: serve was down %d %s in the history it keeps (the last %d; %d after a crash), latest first: %s. Calls of those times may be missing; a timeline of their time marks them (every one: --format json, \"downtimes\"; docs/runbooks.md#after-serve-was-down).",
		len(ds), times, pipeline.DowntimesKept, crashes, strings.Join(latest, "; ")), true
}
