package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestAPIError_SaysHowToAuthenticate: a command refused with 401 says how
// to give a token; another refusal is shown as the server said it.
func TestAPIError_SaysHowToAuthenticate(t *testing.T) {
	status := http.StatusUnauthorized
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"missing or unknown bearer token"}`, status)
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"findings", "--api-url", srv.URL},
		{"report", "--api-url", srv.URL, "--format", "json"},
	} {
		var out, errs bytes.Buffer
		t.Setenv("MCPAUDIT_TOKEN", "")
		if code := run(context.Background(), args, nil, &out, &errs); code == 0 {
			t.Errorf("%v: exit 0 on a 401", args)
		}
		if !strings.Contains(errs.String(), "401") || !strings.Contains(errs.String(), "--token or $MCPAUDIT_TOKEN") {
			t.Errorf("%v: %q, want the 401 and how to give a token", args, errs.String())
		}
	}
	status = http.StatusForbidden
	var out, errs bytes.Buffer
	run(context.Background(), []string{"findings", "--api-url", srv.URL}, nil, &out, &errs)
	if !strings.Contains(errs.String(), "403") || strings.Contains(errs.String(), "--token") {
		t.Errorf("403: %q, want the status without the token hint", errs.String())
	}
}

// TestAPIError_MessageNotJSON: a refused parameter is told as the API's
// message, whether the command asks a collector or reads a data dir, not
// as the JSON object that carries it.
func TestAPIError_MessageNotJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"parameter since: want an RFC 3339 time, a UTC time such as 2026-12-04 14:02, or a duration such as 1h or 30d, not \"09:00\""}`+"\n")
	}))
	defer srv.Close()
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, storeFile), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{
		{"findings", "--api-url", srv.URL, "--since", "09:00"},
		{"findings", "--data-dir", dir, "--since", "09:00"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &errs); code == 0 {
			t.Fatalf("%v: exit 0", args)
		}
		msg := errs.String()
		if !strings.Contains(msg, `parameter since: want an RFC 3339 time, a UTC time such as 2026-12-04 14:02, or a duration such as 1h or 30d, not "09:00"`) || strings.Contains(msg, `{"error"`) {
			t.Errorf("%v: %q, want the message itself", args, msg)
		}
	}
}

// TestQuery_NoStore: a command that reads a data dir holding no store
// fails saying so and what to give, and creates nothing there (it used
// to create an empty store and answer every question with nothing).
func TestQuery_NoStore(t *testing.T) {
	for _, cmd := range [][]string{{"findings"}, {"calls"}, {"slo"}, {"timeline", "vault/a.md"}} {
		dir := t.TempDir()
		args := append(slices.Clone(cmd), "--data-dir", dir)
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, nil, &out, &errs); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
		if msg := errs.String(); !strings.Contains(msg, "no store in the data dir "+dir) || !strings.Contains(msg, "--api-url") {
			t.Errorf("%v: %q, want it to say there is no store and what to give", args, msg)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%v: the data dir now holds %d files (%s...), want none", args, len(ents), ents[0].Name())
		}
	}
}
