package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/mcpaudit/mcpaudit/internal/access"
)

const tokenUsage = `usage: mcpaudit token <command> [flags]

commands:
  new --name NAME --tenant TENANT [--scopes ingest]
                 draw a random token; print it once on stderr and, on stdout, its line
                 for serve.auth.tokens_file (the file holds only the hash)
  hash           read a token on standard input and print its hash (sha256:HEX)

Scopes: ingest (send calls), query (the API, the page, the report), metrics
(/metrics with serve.auth.metrics_token), debug (/debug/pprof/ of serve --pprof,
tenant * only). Tenant * reads every tenant (query, metrics, debug). Send SIGHUP
to serve to read the file again.
`

const tokenNewUsage = `usage: mcpaudit token new --name NAME --tenant TENANT [--scopes SCOPES]

Draws a random token (mcpa_ and 43 characters) and prints it once, on standard
error: give it to the client (Authorization: Bearer TOKEN). On standard output
it prints the token's line for serve.auth.tokens_file,

  NAME TENANT SCOPES sha256:HEX

which holds only the token's hash: append it to the file and send SIGHUP to
serve (or restart it). A lost token cannot be shown again: draw a new one and
delete the old line. Nothing else is written.

Scopes: ingest (send calls), query (the API, the page, the report), metrics
(/metrics with serve.auth.metrics_token). Tenant * reads every tenant: query
and metrics only, never with ingest.

flags:
`

// tokenCommand implements mcpaudit token new and hash.
func tokenCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return &exitError{code: 2}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, tokenUsage)
		return nil
	case "new":
		fs := flag.NewFlagSet("token new", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprint(stderr, tokenNewUsage)
			fs.PrintDefaults()
		}
		name := fs.String("name", "", "the credential's name, one word: the logs, and the findings it acknowledges or resolves, name it (required)")
		tenant := fs.String("tenant", "", "the tenant its calls and queries belong to, one word, or * for every tenant (required)")
		scopes := fs.String("scopes", "ingest", "what it may do, comma-separated without spaces: ingest, query, metrics, debug (debug: tenant * only)")
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &exitError{code: 2}
		}
		if fs.NArg() > 0 {
			return &exitError{code: 2, err: fmt.Errorf("token new: unexpected argument %q: it takes flags only (mcpaudit token new --help)", fs.Arg(0))}
		}
		for _, f := range []struct{ flag, v string }{{"name", *name}, {"tenant", *tenant}, {"scopes", *scopes}} {
			switch {
			case f.v == "":
				return &exitError{code: 2, err: fmt.Errorf("token new: --%s is required (mcpaudit token new --help)", f.flag)}
			case strings.ContainsFunc(f.v, unicode.IsSpace):
				return &exitError{code: 2, err: fmt.Errorf("token new: --%s %q: must be one word, as the tokens file splits its lines at spaces", f.flag, f.v)}
			}
		}
		raw := make([]byte, 32)
		rand.Read(raw)
		tok := "mcpa_" + base64.RawURLEncoding.EncodeToString(raw)
		line := fmt.Sprintf("%s %s %s %s", *name, *tenant, *scopes, access.FormatHash(access.HashToken(tok)))
		// The line is checked as the file will be read.
		if _, err := access.ParseTokens([]byte(line)); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("token new: %w", err)}
		}
		fmt.Fprintf(stderr, "token (shown once; give it to the client, keep only the line below): %s\n", tok)
		fmt.Fprintln(stdout, line)
		return nil
	case "hash":
		line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
		tok := strings.TrimSpace(line)
		if tok == "" {
			if err == nil || err == io.EOF {
				err = errors.New("no token on standard input")
			}
			return &exitError{code: 2, err: fmt.Errorf("token hash: %w", err)}
		}
		fmt.Fprintln(stdout, access.FormatHash(access.HashToken(tok)))
		return nil
	}
	fmt.Fprintf(stderr, "mcpaudit token: unknown command %q\n\n%s", args[0], tokenUsage)
	return &exitError{code: 2}
}
