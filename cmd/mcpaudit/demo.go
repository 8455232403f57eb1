package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/proxy"
	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/forward"
	"github.com/mcpaudit/mcpaudit/internal/demo"
)

func demoCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "server" {
		return demoServerCommand(ctx, args[1:], stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit demo [--duration D] [flags]\n       mcpaudit demo server --dialect thegram|oddlynew (--listen ADDR | --stdio) [--faults RATE] [--seed N]\n\n"+
			"Runs a collector, simulated Thegram and Oddlynew servers with faults behind proxies, and agents\n"+
			"that retry correctly or make each documented mistake; prints findings as they happen and, at the\n"+
			"end, what the agents did next to what was found.\n\nflags:")
		fs.PrintDefaults()
	}
	duration := fs.Duration("duration", 30*time.Second, "how long the agents work")
	faults := fs.Float64("faults", 0.3, "fraction of writes the servers fault")
	seed := fs.Uint64("seed", 1, "seed of the faults")
	apiListen := fs.String("api-listen", "127.0.0.1:9464", "the collector's query API and /metrics")
	dataDir := fs.String("data-dir", "", "the collector's data dir (default: a temporary dir, removed at the end)")
	verbose := fs.Bool("v", false, "log the components' own messages to stderr")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *faults < 0 || *faults > 1 {
		return &exitError{code: 2, err: errors.New("--faults: want a fraction between 0 and 1")}
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	d, err := startDemo(ctx, demoOptions{faults: *faults, seed: *seed, apiListen: *apiListen, dataDir: *dataDir, log: log, out: stdout})
	if err != nil {
		return err
	}
	defer d.close()
	fmt.Fprintf(stdout, "mcpaudit demo: collector API and /metrics on http://%s, Thegram proxy on http://%s/mcp, Oddlynew proxy on http://%s/mcp\n",
		d.srv.apiAddr, d.proxyAddr["thegram"], d.proxyAddr["oddlynew"])
	fmt.Fprintf(stdout, "agents work for %v with %.0f%% of writes faulted; findings as they come:\n\n", *duration, *faults*100)
	wctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	d.runAgents(wctx)
	fmt.Fprintln(stdout, "\nagents done; waiting for the last findings...")
	d.settle(ctx)
	d.report(stdout)
	fmt.Fprint(stdout, demoAfterword(*dataDir))
	return nil
}

// demoOptions configure a demo run.
type demoOptions struct {
	faults    float64
	seed      uint64
	apiListen string
	dataDir   string
	log       *slog.Logger
	out       io.Writer
	// verify and lateness override the detector's windows; 0 keeps the
	// demo's defaults.
	verify, lateness time.Duration
}

// demoRun is a running demo: collector, servers, proxies and agents.
type demoRun struct {
	opts      demoOptions
	srv       *server
	windows   time.Duration // from the last call until every window has closed
	tmp       string
	faults    map[string]*demo.Injector
	proxies   []*proxy.Proxy
	forwarder []*forward.Forwarder
	https     []*http.Server
	proxyAddr map[string]string
	agents    []*demo.Agent
	sessions  []*mcp.ClientSession

	mu       sync.Mutex
	seen     map[string]bool
	printed  []audit.Finding
	stopPoll context.CancelFunc
	pollDone chan struct{}
}

// startDemo starts the collector, the servers and their proxies.
func startDemo(ctx context.Context, o demoOptions) (*demoRun, error) {
	d := &demoRun{opts: o, faults: map[string]*demo.Injector{}, proxyAddr: map[string]string{}, seen: map[string]bool{}}
	cfg := NewDefaultConfig()
	if o.dataDir == "" {
		tmp, err := os.MkdirTemp("", "mcpaudit-demo-")
		if err != nil {
			return nil, err
		}
		d.tmp, o.dataDir = tmp, tmp
	}
	cfg.Serve.DataDir = o.dataDir
	cfg.Serve.IngestListen, cfg.Serve.GRPCListen, cfg.Serve.APIListen = "127.0.0.1:0", "", o.apiListen
	// Every session reaches this one collector in order: a short lateness
	// bound shows findings within a second or two, and a short
	// verification window shows unverified writes within the demo.
	cfg.Detect.Lateness, cfg.Detect.VerifyWindow, cfg.Detect.IdleTimeout = time.Second, 10*time.Second, 2*time.Second
	if o.lateness > 0 {
		cfg.Detect.Lateness = o.lateness
	}
	if o.verify > 0 {
		cfg.Detect.VerifyWindow = o.verify
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	srv, err := startServer(ctx, cfg, o.log)
	if err != nil {
		return nil, err
	}
	d.srv, d.windows = srv, cfg.Detect.VerifyWindow+cfg.Detect.Lateness+cfg.Detect.IdleTimeout
	for i, name := range []string{"thegram", "oddlynew"} {
		inj := demo.NewInjector(o.faults, o.seed+uint64(i))
		inj.Hold = 1500 * time.Millisecond
		d.faults[name] = inj
		var s *mcp.Server
		if name == "thegram" {
			s = demo.NewThegram(inj).Server()
		} else {
			s = demo.NewOddlynew(inj).Server()
		}
		upstream, err := d.listen(demo.Handler(s))
		if err != nil {
			d.close()
			return nil, err
		}
		fcfg := forward.NewDefaultConfig()
		fcfg.URL, fcfg.Source = "http://"+srv.ingestAddr, "proxy/"+name+"/demo"
		fcfg.BufferDir = o.dataDir + "/forward-" + name
		fcfg.FlushInterval = 200 * time.Millisecond
		f, err := forward.New(fcfg, nil, o.log)
		if err != nil {
			d.close()
			return nil, err
		}
		d.forwarder = append(d.forwarder, f)
		pcfg := proxy.NewDefaultConfig()
		pcfg.Upstream, pcfg.Server = "http://"+upstream, name
		p, err := proxy.New(pcfg, func(r *tap.Record) { f.Record(r) }, nil, o.log)
		if err != nil {
			d.close()
			return nil, err
		}
		d.proxies = append(d.proxies, p)
		if d.proxyAddr[name], err = d.listen(p); err != nil {
			d.close()
			return nil, err
		}
	}
	pctx, cancel := context.WithCancel(context.Background())
	d.stopPoll, d.pollDone = cancel, make(chan struct{})
	go d.poll(pctx)
	return d, nil
}

func (d *demoRun) listen(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	d.https = append(d.https, hs)
	go hs.Serve(ln)
	return ln.Addr().String(), nil
}

// demoAgents are the agents of a demo: per server, one correct agent and
// one per mistake that server's documents warn about.
var demoAgents = []struct {
	server   string
	behavior demo.Behavior
}{
	{"thegram", demo.Correct}, {"thegram", demo.BlindRetry}, {"thegram", demo.NewKeyReplay}, {"thegram", demo.RetryFixInput},
	{"oddlynew", demo.Correct}, {"oddlynew", demo.BlindRetry}, {"oddlynew", demo.RetryFixInput},
	{"oddlynew", demo.Recreate}, {"oddlynew", demo.IgnoreRetryAfter},
}

// runAgents connects every agent through its server's proxy and lets them
// work until ctx ends.
func (d *demoRun) runAgents(ctx context.Context) {
	var wg sync.WaitGroup
	for i, spec := range demoAgents {
		name := fmt.Sprintf("%s-%s", spec.server, spec.behavior)
		c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1.0"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + d.proxyAddr[spec.server] + "/mcp", DisableStandaloneSSE: true}, nil)
		if err != nil {
			fmt.Fprintf(d.opts.out, "agent %s cannot connect: %v\n", name, err)
			continue
		}
		d.sessions = append(d.sessions, cs)
		a := &demo.Agent{Name: name, Server: spec.server, Behavior: spec.behavior, Session: cs}
		d.agents = append(d.agents, a)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A step in progress when the time is up is finished, so that
			// no agent is cut off between an uncertain write and its check.
			step := func() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				a.Step(sctx)
			}
			// Stagger the agents so that their output interleaves.
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			for ctx.Err() == nil {
				step()
				select {
				case <-ctx.Done():
				case <-time.After(300 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	for _, cs := range d.sessions {
		cs.Close()
	}
}

// poll prints findings as the collector makes them.
func (d *demoRun) poll(ctx context.Context) {
	defer close(d.pollDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		d.fetch()
	}
}

// fetch reads the findings from the API and prints the new ones.
func (d *demoRun) fetch() []audit.Finding {
	resp, err := http.Get("http://" + d.srv.apiAddr + "/api/v1/findings?limit=1000")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var page struct {
		Findings []audit.Finding `json:"findings"`
	}
	if json.NewDecoder(resp.Body).Decode(&page) != nil {
		return nil
	}
	sort.Slice(page.Findings, func(i, j int) bool { return page.Findings[i].Time.Before(page.Findings[j].Time) })
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range page.Findings {
		key := string(f.Kind) + strings.Join(f.Calls, ",")
		if d.seen[key] {
			continue
		}
		d.seen[key] = true
		d.printed = append(d.printed, f)
		fmt.Fprintf(d.opts.out, "  %-8s %-21s %-8s %s\n", f.Severity, f.Kind, f.Server, f.Summary)
	}
	return page.Findings
}

// settle sends what the proxies recorded and waits until the collector's
// findings stop changing.
func (d *demoRun) settle(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, f := range d.forwarder {
		f.Flush(fctx)
	}
	// The watermark moves with the wall clock once traffic stops: the last
	// verification windows close after the lateness bound, the sources'
	// idle timeout and the window itself; then wait until nothing new comes.
	fmt.Fprintf(d.opts.out, "(the last verification windows close in about %v)\n", d.windows.Round(time.Second))
	closed := time.Now().Add(d.windows)
	quiet := 0
	for (quiet < 4 || time.Now().Before(closed)) && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		d.mu.Lock()
		n := len(d.printed)
		d.mu.Unlock()
		d.fetch()
		d.mu.Lock()
		if len(d.printed) == n {
			quiet++
		} else {
			quiet = 0
		}
		d.mu.Unlock()
	}
}

// report prints what the agents did next to what was found.
func (d *demoRun) report(w io.Writer) {
	mistakes := map[string]map[demo.Behavior]int{}
	uncertain := map[string]int{}
	for _, a := range d.agents {
		for _, e := range a.Events() {
			if mistakes[a.Name] == nil {
				mistakes[a.Name] = map[demo.Behavior]int{}
			}
			if e.Mistake != "" {
				mistakes[a.Name][e.Mistake]++
			}
			if e.Uncertain {
				uncertain[a.Name]++
			}
		}
	}
	fmt.Fprintln(w, "\nwhat the agents did:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  agent\tuncertain outcomes met\tmistakes made")
	for _, a := range d.agents {
		var ms []string
		for b, n := range mistakes[a.Name] {
			ms = append(ms, fmt.Sprintf("%s ×%d", b, n))
		}
		sort.Strings(ms)
		if len(ms) == 0 {
			ms = []string{"none"}
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", a.Name, uncertain[a.Name], strings.Join(ms, ", "))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nfaults the servers injected:")
	for _, name := range []string{"thegram", "oddlynew"} {
		counts := map[string]int{}
		for _, j := range d.faults[name].Journal() {
			k := string(j.Fault)
			if j.Applied {
				k += " (applied)"
			} else {
				k += " (not applied)"
			}
			counts[k]++
		}
		var parts []string
		for k, n := range counts {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "  %-9s %s\n", name, strings.Join(parts, ", "))
	}
	fmt.Fprintln(w, "\nwhat mcpaudit found:")
	byKind := map[string]map[string]int{}
	d.mu.Lock()
	for _, f := range d.printed {
		agent := d.agentOf(f)
		if byKind[string(f.Kind)] == nil {
			byKind[string(f.Kind)] = map[string]int{}
		}
		byKind[string(f.Kind)][agent]++
	}
	d.mu.Unlock()
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  finding\tcount\tagents")
	for _, k := range audit.Kinds {
		agents := byKind[string(k)]
		total := 0
		var names []string
		for a, n := range agents {
			total += n
			names = append(names, fmt.Sprintf("%s ×%d", a, n))
		}
		sort.Strings(names)
		if total == 0 {
			names = []string{"-"}
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", k, total, strings.Join(names, ", "))
	}
	tw.Flush()
}

// demoAfterword says where the demo's findings can still be read: its
// collector stops when the demo returns, so its API address would lead
// nowhere; only a data dir given with --data-dir is kept.
func demoAfterword(dataDir string) string {
	if dataDir == "" {
		return "\nthe collector stops now and its temporary data dir is removed; run with --data-dir DIR to keep what it stored\n"
	}
	return fmt.Sprintf("\nthe collector stops now; what it stored stays in %[1]s: mcpaudit findings --data-dir %[1]s (or mcpaudit serve --data-dir %[1]s for the page)\n", dataDir)
}

// agentOf names the agent whose session a finding is about.
func (d *demoRun) agentOf(f audit.Finding) string {
	for i, cs := range d.sessions {
		if cs.ID() == f.Session && i < len(d.agents) {
			return d.agents[i].Name
		}
	}
	return "?"
}

func (d *demoRun) close() {
	if d.stopPoll != nil {
		d.stopPoll()
		<-d.pollDone
	}
	for _, hs := range d.https {
		hs.Close()
	}
	for _, p := range d.proxies {
		p.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, f := range d.forwarder {
		f.Close(ctx)
	}
	if d.srv != nil {
		d.srv.shutdown(ctx)
	}
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
	}
}

func demoServerCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit demo server --dialect thegram|oddlynew (--listen ADDR | --stdio) [--faults RATE] [--seed N]\n\n"+
			"Serves a simulated MCP server (Streamable HTTP at /mcp, or stdio) over in-memory state.\n\nflags:")
		fs.PrintDefaults()
	}
	dialect := fs.String("dialect", "thegram", "thegram or oddlynew")
	listen := fs.String("listen", "", "serve Streamable HTTP at http://ADDR/mcp")
	stdio := fs.Bool("stdio", false, "serve on stdin and stdout")
	faults := fs.Float64("faults", 0, "fraction of writes to fault (timeouts before or after applying, lost responses, COMMIT_UNKNOWN or in_flight_unknown); 0: none")
	seed := fs.Uint64("seed", 1, "seed of the faults")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	var errs []error
	if (*listen == "") == !*stdio {
		errs = append(errs, errors.New("exactly one of --listen or --stdio is required"))
	}
	if *faults < 0 || *faults > 1 {
		errs = append(errs, errors.New("--faults: want a fraction between 0 and 1"))
	}
	var s *mcp.Server
	inj := demo.NewInjector(*faults, *seed)
	switch *dialect {
	case "thegram":
		s = demo.NewThegram(inj).Server()
	case "oddlynew":
		s = demo.NewOddlynew(inj).Server()
	default:
		errs = append(errs, fmt.Errorf("--dialect: %q is neither thegram nor oddlynew", *dialect))
	}
	if err := errors.Join(errs...); err != nil {
		return &exitError{code: 2, err: err}
	}
	if *stdio {
		return demo.RunStdio(ctx, s, io.NopCloser(stdin), stdout)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", *listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", demo.Handler(s))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	fmt.Fprintf(stderr, "mcpaudit demo server: %s on http://%s/mcp (faults %.2f)\n", *dialect, ln.Addr(), *faults)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}
