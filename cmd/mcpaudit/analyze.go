package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
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
	format := fs.String("format", "text", "output format: text or json (one finding per line on stdout, summary on stderr)")
	failOn := fs.String("fail-on", "info", "exit 1 when a finding of this severity or higher is found: info, warning or critical")
	configFile := fs.String("config", "", "YAML config file (dialects and detector windows)")
	metricsFile := fs.String("metrics", "", "write the Prometheus metrics of the run to this file in exposition format")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal and the input is large), always or never")
	var dialects multiFlag
	fs.Var(&dialects, "dialect", "map a server to a dialect, NAME=thegram|oddlynew|generic (repeatable)")
	cfg := NewDefaultConfig()
	fs.DurationVar(&cfg.Detect.VerifyWindow, "verify-window", cfg.Detect.VerifyWindow, "how long an uncertain write may stay unverified (event time)")
	fs.DurationVar(&cfg.Detect.CorrelationWindow, "correlation-window", cfg.Detect.CorrelationWindow, "how far apart correlated calls may be (event time)")
	fs.DurationVar(&cfg.Detect.Lateness, "lateness", cfg.Detect.Lateness, "how far out of order calls may arrive")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{code: 2}
	}
	usageErr := func(format string, a ...any) error {
		return &exitError{code: 2, err: fmt.Errorf("analyze: "+format, a...)}
	}
	if *format != "text" && *format != "json" {
		return usageErr("--format must be text or json, not %q", *format)
	}
	threshold := audit.Severity(*failOn)
	if threshold.Rank() == 0 {
		return usageErr("--fail-on must be info, warning or critical, not %q", *failOn)
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
	if err := out.Flush(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("cannot write findings: %w", err)}
	}

	sum := stderr
	if !col.json {
		col.printTable(out)
		sum = out
	}
	printSummary(sum, det, &rejects)
	if err := out.Flush(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("cannot write findings: %w", err)}
	}
	if mw != nil {
		if err := mw.writeFile(*metricsFile); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	if det.eng.Stats().Calls == 0 && rejects.n > 0 {
		return &exitError{code: 2, err: errors.New("analyze: no usable call in the input")}
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
}

func newAnalyzer(cfg Config, sinks ...audit.Sink) *analyzer {
	e := detect.NewEngine(cfg.Detect, sinks...)
	// A file given twice, a capture appended to itself: a call taken again
	// by its id is dropped.
	e.DropRepeatedIDs()
	return &analyzer{eng: e, reader: dialect.NewReader(cfg.Dialects)}
}

func (a *analyzer) add(c *audit.Call) {
	a.eng.Add("analyze", a.reader.Read(c), time.Time{})
}

// input is one capture being read, with its next call.
type input struct {
	dec    *capture.Decoder
	closer io.Closer
	head   *audit.Call
	done   bool
}

// advance reads the input's next call, reporting rejects on the way.
func (in *input) advance(rejects *rejectLog) error {
	for {
		c, err := in.dec.Next()
		if err == io.EOF {
			in.done, in.head = true, nil
			rejects.ignored += in.dec.Ignored
			return nil
		}
		if err != nil {
			if capture.IsReject(err) {
				rejects.add(err)
				continue
			}
			return err
		}
		in.head = c
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
		dec, err := capture.NewDecoder(&countingReader{r: r, n: read}, display)
		if err != nil {
			if in.closer != nil {
				in.closer.Close()
			}
			return err
		}
		in.dec = dec
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
			if !in.done && (next == nil || in.head.Time.Before(next.head.Time)) {
				next = in
			}
		}
		if next == nil {
			return nil
		}
		det.add(next.head)
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
}

func (c *collector) Call(*audit.Record)                   {}
func (c *collector) Write(*audit.Write, audit.WriteState) {}
func (c *collector) Finding(f *audit.Finding) {
	if f.Severity.Rank() >= c.threshold.Rank() {
		c.failing++
	}
	if c.json {
		// A Finding holds only strings, times and slices of strings: it
		// always marshals.
		b, _ := json.Marshal(f)
		c.out.Write(append(b, '\n'))
		return
	}
	c.findings = append(c.findings, *f)
}

func (c *collector) printTable(w io.Writer) {
	if len(c.findings) == 0 {
		fmt.Fprintln(w, "No findings.")
		fmt.Fprintln(w)
		return
	}
	sort.SliceStable(c.findings, func(i, j int) bool { return c.findings[i].Time.Before(c.findings[j].Time) })
	fmt.Fprintf(w, "Findings (%d):\n", len(c.findings))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSEVERITY\tKIND\tSERVER\tDOCUMENT / KEY\tSUMMARY")
	for _, f := range c.findings {
		target := f.Document
		if f.Key != "" {
			if target != "" {
				target += " / "
			}
			target += f.Key
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Time.UTC().Format("2006-01-02 15:04:05"), f.Severity, f.Kind, f.Server, target, f.Summary)
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// rejectLog keeps the first rejected inputs and counts the rest.
type rejectLog struct {
	n       int
	shown   []string
	ignored int
}

func (r *rejectLog) add(err error) {
	r.n++
	if len(r.shown) < maxRejectsShown {
		r.shown = append(r.shown, err.Error())
	}
}

func printSummary(w io.Writer, det *analyzer, rejects *rejectLog) {
	s := det.eng.Stats()
	fmt.Fprintf(w, "Calls: %d", s.Calls)
	if s.Duplicates > 0 {
		fmt.Fprintf(w, " (%d duplicate observations dropped)", s.Duplicates)
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
