package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// healthcheckCommand implements `mcpaudit healthcheck`: it asks a running
// collector's /healthz (or --url) and exits 0 when it answers 200, 1
// otherwise. Container images without a shell or curl use it as their
// HEALTHCHECK. --api-url names the API as every other client command
// does (op21's D7); --url, the full URL asked, is kept.
func healthcheckCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:9464/healthz", "full URL to ask: /healthz (the process is up) or /readyz (the store answers) of serve.api_listen")
	apiURL := fs.String("api-url", "", "URL of the mcpaudit serve API, as the other commands take it (e.g. http://127.0.0.1:9464): its /healthz is asked, or the path given (.../readyz); instead of --url")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: mcpaudit healthcheck [--api-url URL | --url URL] [--timeout 3s]\n\nExit 0 when the collector answers 200, 1 when it does not.\n\n")
		fs.PrintDefaults()
	}
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if *apiURL != "" {
		urlSet := false
		fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
		if urlSet {
			return &exitError{code: 2, err: errors.New("healthcheck: give --api-url or --url, not both")}
		}
		*url = healthURL(*apiURL)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("healthcheck: %w", err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("healthcheck: cannot reach %s: %w", *url, err)}
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return &exitError{code: 1, err: fmt.Errorf("healthcheck: %s answered %s", *url, resp.Status)}
	}
	fmt.Fprintf(stdout, "%s: %s\n", *url, resp.Status)
	return nil
}

// healthURL is the URL healthcheck asks for --api-url u: u's /healthz when
// u names the API (no path, or "/"), u itself when it names a path.
func healthURL(u string) string {
	rest := u
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 && strings.TrimRight(rest[i:], "/") != "" {
		return u
	}
	return strings.TrimRight(u, "/") + "/healthz"
}
