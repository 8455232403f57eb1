package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestWrongListener: a path of one of serve's HTTP listeners asked of the
// other is answered 404 with which listener this is and where the path is
// served, and a command's error names the URL it asked. Found by op19 (D3):
// POST /v1/calls to the API listener answered the page's "404 page not
// found", and `findings --api-url` aimed at the ingest listener said
// "mcpaudit: 404 Not Found: 404 page not found".
func TestWrongListener(t *testing.T) {
	api, ingest, _ := serveInTest(t)
	f := func(method, url, want string) {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), want) {
			t.Errorf("%s %s = %s %q; want 404 saying %q", method, url, resp.Status, b, want)
		}
	}
	f("POST", "http://"+api+"/v1/calls", "serve's API listener (serve.api_listen): calls and traces are posted to the ingest listener (serve.ingest_listen)")
	f("POST", "http://"+api+"/v1/traces", "serve's API listener (serve.api_listen)")
	f("GET", "http://"+ingest+"/api/v1/findings", "serve's ingest listener (serve.ingest_listen), which takes POST /v1/calls and POST /v1/traces")
	f("GET", "http://"+ingest+"/metrics", "on the API listener (serve.api_listen)")
	f("GET", "http://"+ingest+"/", "serve's ingest listener")
	// The right listener still answers its own paths.
	if resp, err := http.Get("http://" + ingest + "/v1/calls"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/calls on the ingest listener = %s, want 405", resp.Status)
	}
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"findings", "--api-url", "http://" + ingest}, nil, &out, &errs); code == 0 {
		t.Fatal("findings against the ingest listener: exit 0")
	}
	for _, want := range []string{"GET http://" + ingest + "/api/v1/findings", "404 Not Found", "serve's ingest listener"} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("findings against the ingest listener said %q; want it to name %q", errs.String(), want)
		}
	}
}
