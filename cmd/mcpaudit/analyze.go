package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/redact"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// maxRejectsShown bounds the rejected-input lines printed one by one.
const maxRejectsShown = 20

func analyzeCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit analyze [flags] FILE...|-\n\nReads call records (NDJSON or JSON array) or OTLP JSON, plain or gzip, and prints findings.\n\nflags:")
		fs.PrintDefaults()
	}
	format := fs.String("format", "text", "output format: text or json (one finding per line on stdout, in the order of the text table; the summary on stderr)")
	summaryFormat := fs.String("summary", "text", "summary format: text, or json (one object, docs/api.md#analyze-summary), printed after the findings (on stderr with --format json)")
	failOn := fs.String("fail-on", "info", "exit 1 when a finding of this severity or higher is found: info, warning, critical, or never")
	configFile := fs.String("config", "", "YAML config file (dialects and detector windows)")
	metricsFile := fs.String("metrics", "", "write the Prometheus metrics of the run to this file in exposition format")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal and the input is large), always or never")
	redactOn := fs.Bool("redact", false, "mask secrets in arguments and results first, as serve does (the redact section of --config); the ids of calls holding secrets then equal serve's")
	var dialects multiFlag
	fs.Var(&dialects, "dialect", "map a server to a dialect, NAME=thegram|oddlynew|generic (repeatable)")
	cfg := NewDefaultConfig()
	fs.Var((*durationFlag)(&cfg.Detect.VerifyWindow), "verify-window", "how long an uncertain write may stay unverified (event time; 5m, 1h, 1d)")
	fs.Var((*durationFlag)(&cfg.Detect.CorrelationWindow), "correlation-window", "how far apart correlated calls may be (event time; 1h, 1d)")
	fs.Var((*durationFlag)(&cfg.Detect.Lateness), "lateness", "how far out of order calls may arrive (30s, 5m)")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		return &exitError{code: 2, err: fmt.Errorf("analyze: "+format, a...)}
	}
	if *format != "text" && *format != "json" {
		return usageErr("--format must be text or json, not %q", *format)
	}
	threshold := audit.Severity(*failOn)
	if threshold.Rank() == 0 && *failOn != failNever {
		return usageErr("--fail-on must be info, warning, critical or never, not %q", *failOn)
	}
	if *summaryFormat != "text" && *summaryFormat != "json" {
		return usageErr("--summary must be text or json, not %q", *summaryFormat)
	}
	if fs.NArg() == 0 {
		return usageErr("no input: name capture files, or - for standard input")
	}
	if *configFile != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		flagDetect := cfg.Detect
		fileCfg, err := LoadConfig(*configFile)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		cfg = fileCfg
		// Flags given on the command line win over the file.
		if set["verify-window"] {
			cfg.Detect.VerifyWindow = flagDetect.VerifyWindow
		}
		if set["correlation-window"] {
			cfg.Detect.CorrelationWindow = flagDetect.CorrelationWindow
		}
		if set["lateness"] {
			cfg.Detect.Lateness = flagDetect.Lateness
		}
	}
	for _, m := range dialects {
		name, d, ok := strings.Cut(m, "=")
		if !ok || name == "" {
			return usageErr("--dialect wants NAME=DIALECT, not %q", m)
		}
		if cfg.Dialects.Servers == nil {
			cfg.Dialects.Servers = map[string]string{}
		}
		cfg.Dialects.Servers[name] = d
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("analyze: invalid configuration: %w", err)}
	}
	if !*redactOn {
		// analyze stores nothing: masking costs time for no protection.
		cfg.Redact.Off = true
	}

	out := bufio.NewWriterSize(stdout, 1<<16)
	defer out.Flush()
	col := &collector{json: *format == "json", out: out, threshold: threshold}
	sinks := []audit.Sink{col}
	var mw *metricsWriter
	if *metricsFile != "" {
		mw = newMetricsWriter()
		sinks = append(sinks, mw.sink)
	}
	det := newAnalyzer(cfg, sinks...)

	var rejects rejectLog
	var read atomic.Int64
	total := inputSize(fs.Args())
	stop := startProgress(ctx, *progress, stderr, total, &read)
	if err := analyzeInputs(ctx, fs.Args(), stdin, det, &rejects, &read); err != nil {
		stop()
		return &exitError{code: 2, err: err}
	}
	det.eng.Flush()
	stop()

	col.sort()
	if col.json {
		col.printJSON(out)
	} else {
		col.printTable(out)
	}
	sum := io.Writer(out)
	if col.json {
		if err := out.Flush(); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("cannot write findings: %w", err)}
		}
		sum = stderr
	}
	summary := newSummary(det, &rejects, col)
	if *summaryFormat == "json" {
		b, _ := json.Marshal(summary) // numbers, strings and maps of them
		sum.Write(append(b, '\n'))
	} else {
		printSummary(sum, det, &rejects)
	}
	if err := out.Flush(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("cannot write findings: %w", err)}
	}
	if mw != nil {
		mw.ingest(det, &rejects)
		if err := mw.writeFile(*metricsFile); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	if det.eng.Stats().Calls == 0 {
		// A gate must not pass on no input: say what the input held.
		switch {
		case rejects.n > 0:
			return &exitError{code: 2, err: fmt.Errorf("analyze: no usable call in the input: %d rejected record(s)", rejects.n)}
		case rejects.ignored > 0:
			return &exitError{code: 2, err: fmt.Errorf("analyze: no tools/call in the input: %d record(s) of other methods ignored", rejects.ignored)}
		default:
			return &exitError{code: 2, err: errors.New("analyze: the input holds no call: nothing was analyzed (an empty file?)")}
		}
	}
	if col.failing > 0 {
		return &exitError{code: 1}
	}
	return nil
}

// analyzer reads each call once with its dialect and feeds the engine.
// The inputs, merged by event time, are one finite stream: one source, no
// wall clock, and the end of the last input is the end of event time.
type analyzer struct {
	eng    *detect.Engine
	reader *dialect.Reader
	red    *redact.Redactor
}

// newAnalyzer returns the engine of analyze. Unless cfg.Redact is off, calls
// are masked first as serve masks them (the masks keyed by
// redact.secret_file, or a key drawn for this run): the same calls get the
// same ids and findings as in serve.
func newAnalyzer(cfg Config, sinks ...audit.Sink) *analyzer {
	e := detect.NewEngine(cfg.Detect, sinks...)
	// A file given twice, a capture appended to itself: a call taken again
	// by its id is dropped.
	e.DropRepeatedIDs()
	a := &analyzer{eng: e, reader: dialect.NewReader(cfg.Dialects)}
	if cfg.Redact.Off {
		// Judged, a record read by ReadCopy is filled again with a later
		// call: analyze's sinks keep no record. (Masked, records are
		// copies: nothing to give back.)
		e.OnJudged(a.reader.Recycle)
	}
	if !cfg.Redact.Off {
		secret := make([]byte, 32)
		rand.Read(secret)
		if cfg.Redact.SecretFile != "" {
			if b, err := os.ReadFile(cfg.Redact.SecretFile); err == nil && len(b) >= 16 {
				secret = b
			}
		}
		a.red, _ = newRedactor(cfg, secret) // the configuration was validated
	}
	return a
}

// add judges one call, read once by its decoder. Masked (--redact), it is
// read again from what the masks left, and its payloads dropped as serve
// drops them once read; otherwise it came without payloads and holds
// nothing of the decoder's buffers (capture.Decoder.DropPayloads), and is
// kept as it is.
func (a *analyzer) add(r *audit.Record, known dialect.Known) {
	if a.red != nil {
		if a.red.Call(r.Call) > 0 {
			r = a.reader.ReadKnown(r.Call, known)
		}
		r = r.Lean()
	}
	a.eng.Add("analyze", r, time.Time{})
}

// failNever is the --fail-on value that never fails on findings.
const failNever = "never"

// input is one capture being read, with its next call.
type input struct {
	dec    *capture.Decoder
	reader *dialect.Reader
	closer io.Closer
	head   *audit.Record
	known  dialect.Known
	done   bool
}

// advance reads the input's next call, reporting rejects on the way.
func (in *input) advance(rejects *rejectLog) error {
	for {
		c, err := in.dec.NextRecord(in.reader)
		if err == io.EOF {
			in.done, in.head = true, nil
			rejects.ignored += in.dec.Ignored
			rejects.warned(in.dec)
			return nil
		}
		if err != nil {
			if capture.IsReject(err) {
				rejects.add(err)
				continue
			}
			return err
		}
		in.head, in.known = c, in.dec.Known()
		return nil
	}
}

// analyzeInputs streams the inputs into the detector merged by event time:
// files from several observers, or split by hour, are one stream, as the
// same traffic streamed live would be. Memory holds one call per input.
func analyzeInputs(ctx context.Context, names []string, stdin io.Reader, det *analyzer, rejects *rejectLog, read *atomic.Int64) error {
	var ins []*input
	defer func() {
		for _, in := range ins {
			if in.dec != nil {
				in.dec.Close()
			}
			if in.closer != nil {
				in.closer.Close()
			}
		}
	}()
	for _, name := range names {
		var r io.Reader = stdin
		display := "-"
		in := &input{}
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return fmt.Errorf("cannot open input: %w", err)
			}
			r, display, in.closer = f, name, f
		}
		dec, err := capture.NewDecoder(newCountingReader(r, read), display)
		if err != nil {
			if in.closer != nil {
				in.closer.Close()
			}
			return err
		}
		if det.red == nil {
			dec.DropPayloads()
		}
		in.dec, in.reader = dec, det.reader
		ins = append(ins, in)
		if err := in.advance(rejects); err != nil {
			return err
		}
	}
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		var next *input
		for _, in := range ins {
			if !in.done && (next == nil || in.head.Call.Time.Before(next.head.Call.Time)) {
				next = in
			}
		}
		if next == nil {
			return nil
		}
		det.add(next.head, next.known)
		if err := next.advance(rejects); err != nil {
			return err
		}
	}
}

// collector is the sink of the analyze command: it prints JSON findings as
// they come, or keeps them for the table.
type collector struct {
	json      bool
	out       io.Writer
	threshold audit.Severity
	findings  []audit.Finding
	failing   int
	// ids holds the ids of findings, to keep one of each: two writes of
	// one call to one document under one key share their
	// unverified_write's id, and the store keeps one row of it, which
	// stands while one of them stays unverified (docs/detection.md).
	ids map[string]bool
}

func (c *collector) Call(*audit.Record)                   {}
func (c *collector) Write(*audit.Write, audit.WriteState) {}
func (c *collector) Finding(f *audit.Finding) {
	id := f.ID()
	if c.ids[id] {
		return
	}
	if c.ids == nil {
		c.ids = map[string]bool{}
	}
	c.ids[id] = true
	if c.threshold.Rank() > 0 && f.Severity.Rank() >= c.threshold.Rank() {
		c.failing++
	}
	c.findings = append(c.findings, *f)
}

// WithdrawFinding drops a finding that a call judged late (a line out of
// order within allowed_lateness) settled: judging in order makes none.
func (c *collector) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	id := f.ID()
	delete(c.ids, id)
	for i := range c.findings {
		if c.findings[i].ID() == id {
			if c.threshold.Rank() > 0 && c.findings[i].Severity.Rank() >= c.threshold.Rank() {
				c.failing--
			}
			c.findings = slices.Delete(c.findings, i, i+1)
			return
		}
	}
}

// sort puts the findings in the order both formats print: by time, then by
// severity (critical first), kind, server, document and key, so that equal
// inputs give equal outputs.
func (c *collector) sort() {
	sort.SliceStable(c.findings, func(i, j int) bool {
		a, b := &c.findings[i], &c.findings[j]
		if !a.Time.Equal(b.Time) {
			return a.Time.Before(b.Time)
		}
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() > b.Severity.Rank()
		}
		for _, p := range [][2]string{{string(a.Kind), string(b.Kind)}, {a.Server, b.Server}, {a.Document, b.Document}, {a.Key, b.Key}} {
			if p[0] != p[1] {
				return p[0] < p[1]
			}
		}
		return strings.Join(a.Calls, ",") < strings.Join(b.Calls, ",")
	})
}

// printJSON writes one finding per line (findings.md §5).
func (c *collector) printJSON(w io.Writer) {
	for i := range c.findings {
		// A Finding holds only strings, times and slices of strings: it
		// always marshals. Its MarshalJSON is json.Marshal's own compact,
		// HTML-escaped text, which json.Marshal of the finding would only
		// check and copy again.
		b, _ := c.findings[i].MarshalJSON()
		w.Write(append(b, '\n'))
	}
}

func (c *collector) printTable(w io.Writer) {
	w = printable(w)
	if len(c.findings) == 0 {
		fmt.Fprintln(w, "No findings.")
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintf(w, "Findings (%d):\n", len(c.findings))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tSEVERITY\tKIND\tSERVER\tDOCUMENT / KEY\tSUMMARY")
	for _, f := range c.findings {
		target := f.Document
		if f.Key != "" {
			if target != "" {
				target += " / "
			}
			target += f.Key
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Time.UTC().Format("2006-01-02 15:04:05"), f.Severity, f.Kind, cell(f.Server), cell(target), cell(f.Summary))
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// rejectLog keeps the first rejected inputs and counts the rest.
type rejectLog struct {
	n       int
	shown   []string
	ignored int
	reasons map[metrics.RejectReason]int
	// warns counts the warnings about records kept (capture.Warning), by
	// kind; warnShown holds the first of each kind for each field of each
	// input, up to maxRejectsShown.
	warns     map[string]int
	nWarns    int
	warnShown []string
}

// warned takes the warnings of an input read to its end.
func (r *rejectLog) warned(dec *capture.Decoder) {
	for kind, n := range dec.WarnCounts() {
		if r.warns == nil {
			r.warns = map[string]int{}
		}
		r.warns[kind] += n
		r.nWarns += n
	}
	for i := range dec.Warnings() {
		if len(r.warnShown) < maxRejectsShown {
			r.warnShown = append(r.warnShown, dec.Warnings()[i].Error())
		}
	}
}

func (r *rejectLog) add(err error) {
	r.n++
	if r.reasons == nil {
		r.reasons = map[metrics.RejectReason]int{}
	}
	r.reasons[rejectReason(err)]++
	if len(r.shown) < maxRejectsShown {
		r.shown = append(r.shown, err.Error())
	}
}

func printSummary(w io.Writer, det *analyzer, rejects *rejectLog) {
	s := det.eng.Stats()
	fmt.Fprintf(w, "Calls: %d", s.Calls)
	if s.Duplicates > 0 || s.Collisions > 0 {
		fmt.Fprintf(w, " (%d duplicate observations dropped", s.Duplicates)
		if s.Collisions > 0 {
			// Counted among the duplicates, but they are calls of their
			// own that nothing judged: findings about them may be missing.
			fmt.Fprintf(w, ", %d of them id collisions: another call under the trace and span id of one taken, or another response under its call id, never judged", s.Collisions)
		}
		fmt.Fprint(w, ")")
	}
	if s.Late > 0 {
		fmt.Fprintf(w, " (%d out of time order by more than the lateness bound, judged late)", s.Late)
	}
	if s.TooLate > 0 {
		fmt.Fprintf(w, " (%d beyond the allowed lateness, not judged)", s.TooLate)
	}
	fmt.Fprintln(w)
	for _, o := range []audit.Outcome{audit.OutcomeOK, audit.OutcomeToolError, audit.OutcomeProtocolError, audit.OutcomeNoResponse} {
		fmt.Fprintf(w, "  %-16s %d\n", o, s.Outcomes[o])
	}
	var writes int64
	for _, n := range s.Writes {
		writes += n
	}
	fmt.Fprintf(w, "Writes: %d\n", writes)
	for _, st := range audit.WriteStates {
		fmt.Fprintf(w, "  %-16s %d\n", st, s.Writes[st])
	}
	fmt.Fprintln(w, "Failures by retry action:")
	any := false
	for _, a := range audit.RetryActions {
		codes := s.Failures[a]
		if len(codes) == 0 {
			continue
		}
		any = true
		var total int64
		names := make([]string, 0, len(codes))
		for c, n := range codes {
			total += n
			names = append(names, c)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, c := range names {
			parts[i] = fmt.Sprintf("%s=%d", c, codes[c])
		}
		fmt.Fprintf(w, "  %-20s %d  (%s)\n", a, total, strings.Join(parts, ", "))
	}
	if !any {
		fmt.Fprintln(w, "  none")
	}
	if sli, ok := audit.SLI(s.Writes); ok {
		good := s.Writes[audit.StateDurable] + s.Writes[audit.StateResolved]
		all := good + s.Writes[audit.StateUnverified] + s.Writes[audit.StateDoubleApplied]
		fmt.Fprintf(w, "Write durability SLI: %.4f (%d of %d writes durable or resolved)\n", sli, good, all)
	} else {
		fmt.Fprintln(w, "Write durability SLI: n/a (no terminal write counts toward it)")
	}
	if len(s.Findings) > 0 {
		fmt.Fprint(w, "Findings by kind:")
		for _, k := range audit.Kinds {
			if n := s.Findings[k]; n > 0 {
				fmt.Fprintf(w, " %s=%d", k, n)
			}
		}
		fmt.Fprintln(w)
	}
	if rejects.ignored > 0 {
		fmt.Fprintf(w, "Records and spans of methods other than tools/call, ignored: %d\n", rejects.ignored)
	}
	if rejects.nWarns > 0 {
		// Said only when there are some: the summary of clean input is
		// as it was.
		fmt.Fprintf(w, "Read leniently (records kept, docs/api.md \"Members read leniently\"): %d\n", rejects.nWarns)
		for _, e := range rejects.warnShown {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "Rejected input: %d\n", rejects.n)
	for _, e := range rejects.shown {
		fmt.Fprintf(w, "  %s\n", e)
	}
	if rejects.n > len(rejects.shown) {
		fmt.Fprintf(w, "  ... and %d more\n", rejects.n-len(rejects.shown))
	}
}

// multiFlag collects a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
func (m *multiFlag) repeatable()        {}

// countingReader counts the bytes read, for the progress bar.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingFile is a countingReader of a file, which the decoder may also
// read at offsets (an OTLP JSON document is read twice, the second time
// block by block; the bar follows the first reading).
type countingFile struct {
	countingReader
	f interface {
		io.ReaderAt
		io.Seeker
	}
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) { return c.f.ReadAt(p, off) }
func (c *countingFile) Seek(off int64, whence int) (int64, error) {
	return c.f.Seek(off, whence)
}

// newCountingReader counts what is read of r, keeping the offsets of a file.
func newCountingReader(r io.Reader, n *atomic.Int64) io.Reader {
	if f, ok := r.(interface {
		io.ReaderAt
		io.Seeker
	}); ok {
		return &countingFile{countingReader{r, n}, f}
	}
	return &countingReader{r, n}
}

// inputSize adds up the sizes of the named files; -1 when unknown (stdin).
func inputSize(names []string) int64 {
	var total int64
	for _, n := range names {
		if n == "-" {
			return -1
		}
		fi, err := os.Stat(n)
		if err != nil {
			return -1
		}
		total += fi.Size()
	}
	return total
}

// largeInput is the size from which a progress bar is shown.
const largeInput = 32 << 20

// startProgress draws a progress bar on stderr while the input is read; the
// returned function stops it and clears the line.
func startProgress(ctx context.Context, mode string, stderr io.Writer, total int64, read *atomic.Int64) func() {
	show := mode == "always"
	if mode == "auto" {
		f, ok := stderr.(*os.File)
		if ok {
			if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && (total < 0 || total >= largeInput) {
				show = true
			}
		}
	}
	if !show {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(stderr, "\r\033[K")
				return
			case <-ctx.Done():
				return
			case <-t.C:
				n := read.Load()
				el := time.Since(start).Seconds()
				if total > 0 {
					frac := float64(n) / float64(total)
					bar := strings.Repeat("#", int(frac*30)) + strings.Repeat(".", 30-int(frac*30))
					fmt.Fprintf(stderr, "\r[%s] %3.0f%%  %s of %s  %.0fs", bar, frac*100, human(n), human(total), el)
				} else {
					fmt.Fprintf(stderr, "\r%s read  %.0fs", human(n), el)
				}
			}
		}
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
			<-finished
		}
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
