package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
