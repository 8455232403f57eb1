// Command mcpaudit audits MCP write traffic: it reads tool-call captures (call
// records or OTLP), classifies every failure by its retry action, tracks what
// became of every write and reports findings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/mcpaudit/mcpaudit/internal/version"
)

const usage = `usage: mcpaudit <command> [flags]

commands:
  analyze   analyze capture files (call records or OTLP JSON) and print findings
  serve     run the collector: OTLP and call-record ingest, store, query API
  findings  list findings from a running server (--api-url URL) or a data dir;
            findings ack|resolve|reopen ID --note TEXT changes a finding's state
  timeline  show every call, write state and finding on one document
  calls     list stored calls (--mcp-server, --session, --source, --document, --since, --until, --limit)
  export    write stored calls of a time range as call records (NDJSON) that analyze reads
  slo       show the write-durability SLI and the error budget
  report    the write-durability report (--window 30d --format html|md|json)
  status    show where event time stands per partition and which source holds it back
  config    config validate FILE...: check configuration files; config print [FILE]: the effective configuration
  loadgen   drive a running server with generated traffic and report throughput
  proxy     relay MCP Streamable HTTP to a server and record its tools/call exchanges
  wrap      run a stdio MCP server, relay it byte for byte and record its exchanges
  demo      run simulated servers, agents and a collector; 'demo server' runs one server
  rules     print the Prometheus alert and recording rules
  healthcheck  exit 0 when a running collector answers /healthz (for container health checks)
  token     token new: draw a credential and print its line for the tokens file; token hash: hash a token
  verify    check a data dir's stored history against its tamper-evidence chains and signed checkpoints
  backup    backup --data-dir DIR --out FILE: a consistent copy of the embedded store, while serve runs
  restore   restore --data-dir DIR --from FILE: make a backup the embedded store (serve stopped)
  migrate-calls  migrate-calls --data-dir DIR: move the calls table's calls into call logs (serve stopped)
  keygen    write an Ed25519 key pair for signing checkpoints (serve) and checking them (verify)
  version   print the version, commit and Go version (also --version)

Run 'mcpaudit <command> -h' for the flags of a command.
`

// versionUsage is the help of mcpaudit version.
const versionUsage = `usage: mcpaudit version

Prints the version, commit and Go version of this binary (also mcpaudit --version); a running
collector exports them as mcpaudit_build_info. It takes no flags.
`

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// parseFlags parses a command's args into fs. help is set when -h or --help
// asked for the usage, which fs has printed (the command then ends, exit
// 0); a bad flag, which fs has printed too, is exit status 2.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, &exitError{code: 2}
	}
	return false, nil
}

// parseFlagsOnce is parseFlags, and refuses a flag given twice that takes
// one value, naming it: the flag package keeps the last silently (op23's
// D1: a second --public-key of verify replaced the first). verify and
// keygen use it; serve is started by scripts and tests that override a
// flag by repeating it, so it keeps the last one.
func parseFlagsOnce(fs *flag.FlagSet, args []string) (help bool, err error) {
	if help, err := parseFlags(fs, args); help || err != nil {
		return help, err
	}
	if name, n := repeatedFlag(fs, args); name != "" {
		return false, &exitError{code: 2, err: fmt.Errorf("--%s is given %d times, but it takes one value (see '%s -h')", name, n, fs.Name())}
	}
	return false, nil
}

// repeatable marks a flag.Value that collects every value it is given.
type repeatable interface{ repeatable() }

// repeatedFlag returns the first flag of fs that args give more than once
// though it takes one value, and how often; "" when none. It parses args
// again into a copy of fs whose flags only count: fs has parsed them
// already, so they parse.
func repeatedFlag(fs *flag.FlagSet, args []string) (string, int) {
	shadow := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shadow.SetOutput(io.Discard)
	shadow.Usage = func() {}
	counts := map[string]int{}
	first := ""
	// Repeatable flags are flags of the copy too, so that their values
	// are consumed as in fs, but are not counted.
	fs.VisitAll(func(f *flag.Flag) {
		_, many := f.Value.(repeatable)
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		shadow.Var(&countFlag{name: f.Name, counts: counts, first: &first, isBool: ok && b.IsBoolFlag(), many: many}, f.Name, "")
	})
	if shadow.Parse(args) != nil || first == "" {
		return "", 0
	}
	return first, counts[first]
}

// countFlag counts how often a flag is set, for repeatedFlag.
type countFlag struct {
	name   string
	counts map[string]int
	first  *string
	isBool bool
	many   bool // a repeatable flag: not counted
}

func (c *countFlag) String() string   { return "" }
func (c *countFlag) IsBoolFlag() bool { return c.isBool }
func (c *countFlag) Set(string) error {
	if c.many {
		return nil
	}
	c.counts[c.name]++
	if c.counts[c.name] == 2 && *c.first == "" {
		*c.first = c.name
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command and turns its error into an exit status: 0 clean,
// 1 findings at or above the threshold, 2 unusable input or arguments.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "analyze":
		err = analyzeCommand(ctx, args[1:], stdin, stdout, stderr)
	case "serve":
		err = serveCommand(ctx, args[1:], stderr)
	case "findings":
		err = findingsCommand(args[1:], stdout, stderr)
	case "timeline":
		err = timelineCommand(args[1:], stdout, stderr)
	case "calls":
		err = callsCommand(args[1:], stdout, stderr)
	case "export":
		err = exportCommand(ctx, args[1:], stdout, stderr)
	case "status":
		err = statusCommand(args[1:], stdout, stderr)
	case "slo":
		err = sloCommand(args[1:], stdout, stderr)
	case "report":
		err = reportCommand(ctx, args[1:], stdout, stderr)
	case "loadgen":
		err = loadgenCommand(ctx, args[1:], stdout, stderr)
	case "config":
		err = configCommand(args[1:], stdout, stderr)
	case "rules":
		err = rulesCommand(args[1:], stdout, stderr)
	case "healthcheck":
		err = healthcheckCommand(ctx, args[1:], stdout, stderr)
	case "token":
		err = tokenCommand(args[1:], stdin, stdout, stderr)
	case "verify":
		err = verifyCommand(ctx, args[1:], stdout, stderr)
	case "backup":
		err = backupCommand(ctx, args[1:], stdout, stderr)
	case "restore":
		err = restoreCommand(ctx, args[1:], stdout, stderr)
	case "migrate-calls":
		err = migrateCallsCommand(ctx, args[1:], stdout, stderr)
	case "keygen":
		err = keygenCommand(args[1:], stdout, stderr)
	case "proxy":
		err = proxyCommand(ctx, args[1:], stderr)
	case "wrap":
		err = wrapCommand(ctx, args[1:], stdin, stdout, stderr)
	case "demo":
		err = demoCommand(ctx, args[1:], stdin, stdout, stderr)
	case "version", "--version", "-version":
		// Every other command answers -h with its usage; version printed
		// the version for it, and took any argument silently (op25).
		if len(args) > 1 {
			if h := args[1]; h == "-h" || h == "-help" || h == "--help" {
				fmt.Fprint(stdout, versionUsage)
				return 0
			}
			fmt.Fprintf(stderr, "mcpaudit: version: unexpected argument %q\n\n%s", args[1], versionUsage)
			return 2
		}
		fmt.Fprintln(stdout, "mcpaudit", version.Get())
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "mcpaudit: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == nil {
		return 0
	}
	if e, ok := err.(*exitError); ok {
		if e.err != nil {
			fmt.Fprintln(stderr, "mcpaudit:", e.err)
		}
		return e.code
	}
	fmt.Fprintln(stderr, "mcpaudit:", err)
	return 2
}
