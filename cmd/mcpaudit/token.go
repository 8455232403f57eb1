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

	"github.com/mcpaudit/mcpaudit/internal/access"
)

const tokenUsage = `usage: mcpaudit token <command> [flags]

commands:
  new --name NAME --tenant TENANT [--scopes ingest]
                 draw a random token; print it once on stderr and, on stdout, its line
                 for serve.auth.tokens_file (the file holds only the hash)
  hash           read a token on standard input and print its hash (sha256:HEX)

Scopes: ingest (send calls), query (the API, the page, the report), metrics
(/metrics with serve.auth.metrics_token). Tenant * reads every tenant
(query, metrics). Send SIGHUP to serve to read the file again.
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
		fs.Usage = func() { fmt.Fprint(stderr, tokenUsage) }
		name := fs.String("name", "", "the credential's name, recorded with what it does (required)")
		tenant := fs.String("tenant", "", "its tenant, or * for every tenant (required)")
		scopes := fs.String("scopes", "ingest", "what it may do, comma-separated: ingest, query, metrics")
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &exitError{code: 2}
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
