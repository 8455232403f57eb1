package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/internal/ratelog"
)

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// newServer serves the API over a real embedded store holding one durable
// and one unverified write and one finding.
func newServer(t *testing.T, tenants map[string]string) (*httptest.Server, *bytes.Buffer) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "mcpaudit.db"), sqlite.NewDefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	w1 := audit.Write{CallID: "c_1", Time: t0, Server: "thegram", Session: "s-1", Tool: "gram_patch",
		Document: "ops/a.gram", Key: "req-1", State: audit.StateDurable, StateTime: t0}
	w2 := audit.Write{CallID: "c_2", Seq: 1, Time: t0.Add(time.Second), Server: "thegram", Session: "s-1", Tool: "gram_patch",
		Document: "ops/a.gram", Key: "req-2", State: audit.StateUnverified, Reason: audit.Reason("no_verification"),
		Action: audit.ActionVerifyThenDecide, StateTime: t0.Add(5 * time.Minute)}
	f := audit.Finding{Kind: audit.KindUnverifiedWrite, Severity: audit.SeverityWarning, Server: "thegram",
		Document: "ops/a.gram", Key: "req-2", Session: "s-1", Time: t0.Add(time.Second), Calls: []string{"c_2"},
		RetryAction: audit.ActionVerifyThenDecide, Summary: "unverified"}
	if err := st.Commit(ctx, audit.Results{Writes: []audit.Write{w1, w2}, Findings: []audit.Finding{f}, Watermark: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	q := api.New(st, 0.999)
	q.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	q.Tenants = tenants
	q.Log = ratelog.New(slog.New(slog.NewJSONHandler(&logs, nil)), ratelog.Config{Interval: time.Minute, Burst: 2})
	srv := httptest.NewServer(q.Handler())
	t.Cleanup(srv.Close)
	return srv, &logs
}

// do sends a request and returns the status, the Content-Type and the body.
func do(t *testing.T, method, u, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, buf.Bytes()
}

// TestErrors: every error of the API is a JSON object with one "error"
// string, with the status that says what went wrong.
func TestErrors(t *testing.T) {
	srv, _ := newServer(t, nil)
	for _, tc := range []struct {
		name, method, path string
		status             int
		contains           string
	}{
		{"unknown_path", "GET", "/api/v1/nothing", 404, "no endpoint /api/v1/nothing"},
		{"unknown_version", "GET", "/api/v2/findings", 404, "no endpoint"},
		{"document_without_timeline", "GET", "/api/v1/documents/a.gram", 404, "/timeline"},
		{"wrong_method", "POST", "/api/v1/findings", 405, "method POST not allowed"},
		{"delete", "DELETE", "/api/v1/slo", 405, "allowed: GET"},
		{"unknown_parameter", "GET", "/api/v1/findings?foo=bar", 400, `unknown parameter "foo"`},
		{"several_unknown_parameters", "GET", "/api/v1/writes?zz=1&foo=bar&state=durable", 400, `unknown parameter "foo", "zz"`},
		{"slo_parameter_on_findings", "GET", "/api/v1/findings?window=1h", 400, `unknown parameter "window"`},
		{"timeline_unknown_parameter", "GET", "/api/v1/documents/ops%2Fa.gram/timeline?kind=x", 400, `unknown parameter "kind"`},
		{"bad_kind", "GET", "/api/v1/findings?kind=nope", 400, "unknown finding kind"},
		{"bad_state", "GET", "/api/v1/writes?state=nope", 400, "unknown write state"},
		{"bad_since", "GET", "/api/v1/findings?since=yesterday", 400, "parameter since"},
		{"bad_limit", "GET", "/api/v1/writes?limit=-1", 400, "parameter limit"},
		{"bad_window", "GET", "/api/v1/slo?window=forever", 400, "parameter window"},
		{"bad_target", "GET", "/api/v1/slo?target=2", 400, "parameter target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, h, body := do(t, tc.method, srv.URL+tc.path, "")
			if status != tc.status {
				t.Errorf("status %d, want %d: %s", status, tc.status, body)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var e map[string]any
			if err := json.Unmarshal(body, &e); err != nil || len(e) != 1 {
				t.Fatalf("body %s is not {\"error\": ...}: %v", body, err)
			}
			msg, _ := e["error"].(string)
			if !strings.Contains(msg, tc.contains) {
				t.Errorf("error %q does not say %q", msg, tc.contains)
			}
			if status == 405 && h.Get("Allow") == "" {
				t.Error("405 without an Allow header")
			}
		})
	}
}

// TestWritesSnakeCase: /api/v1/writes uses the same snake_case field names
// as every other endpoint.
func TestWritesSnakeCase(t *testing.T) {
	srv, _ := newServer(t, nil)
	status, _, body := do(t, "GET", srv.URL+"/api/v1/writes?state=unverified", "")
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	var page struct {
		Writes     []map[string]any `json:"writes"`
		NextCursor *string          `json:"next_cursor"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Writes) != 1 || page.NextCursor == nil {
		t.Fatalf("answer %s, want one write and a next_cursor", body)
	}
	w := page.Writes[0]
	want := map[string]any{
		"call_id": "c_2", "seq": float64(1), "time": "2026-11-02T09:00:01Z", "server": "thegram", "tenant": "",
		"session": "s-1", "tool": "gram_patch", "document": "ops/a.gram", "key": "req-2", "state": "unverified",
		"reason": "no_verification", "retry_action": "verify_then_decide", "state_time": "2026-11-02T09:05:00Z",
	}
	for k, v := range want {
		if w[k] != v {
			t.Errorf("%s = %v, want %v", k, w[k], v)
		}
	}
	for k := range w {
		if _, ok := want[k]; !ok {
			t.Errorf("field %q is not in the documented schema", k)
		}
		if strings.ToLower(k) != k {
			t.Errorf("field %q is not snake_case", k)
		}
	}
}

// TestAuth: with tenants, a request without a valid token is refused with
// a JSON error, and the refusals are logged at a bounded rate without the
// token.
func TestAuth(t *testing.T) {
	srv, logs := newServer(t, map[string]string{"tok-acme": "acme"})
	for range 5 {
		status, _, body := do(t, "GET", srv.URL+"/api/v1/findings", "wrong-token")
		if status != 401 || !strings.Contains(string(body), `"error"`) {
			t.Fatalf("status %d %s, want 401 with an error", status, body)
		}
	}
	if status, _, body := do(t, "GET", srv.URL+"/api/v1/findings", "tok-acme"); status != 200 {
		t.Fatalf("a valid token: %d %s", status, body)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 5 refusals with a burst of 2, want 2:\n%s", len(lines), logs)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"kind":"auth_failure"`) || strings.Contains(l, "wrong-token") {
			t.Errorf("log line %s: want kind auth_failure and no token", l)
		}
	}
}

// TestAuthFailureLogNamesNoDocument: a refused timeline request is logged
// by its route, without the document's name.
func TestAuthFailureLogNamesNoDocument(t *testing.T) {
	srv, logs := newServer(t, map[string]string{"tok-acme": "acme"})
	if status, _, _ := do(t, "GET", srv.URL+"/api/v1/documents/plans%2Fmerger-with-globex.gram/timeline", "wrong-token"); status != 401 {
		t.Fatalf("status %d, want 401", status)
	}
	if l := logs.String(); !strings.Contains(l, `"kind":"auth_failure"`) || !strings.Contains(l, "/api/v1/documents/") || strings.Contains(l, "merger") {
		t.Errorf("log %s: want an auth_failure line naming the route, not the document", l)
	}
}

// TestValidRequests: the documented parameters are accepted.
func TestValidRequests(t *testing.T) {
	srv, _ := newServer(t, nil)
	for _, path := range []string{
		"/api/v1/findings?kind=unverified_write&severity=warning&server=thegram&document=ops/a.gram&key=req-2&session=s-1&since=30d&until=2026-11-03T00:00:00Z&limit=10&cursor=&tenant=",
		"/api/v1/writes?state=durable&server=thegram&document=ops/a.gram&since=30d&until=1m&limit=5&cursor=",
		"/api/v1/documents/ops%2Fa.gram/timeline?server=thegram&since=30d&until=1m&limit=5",
		"/api/v1/slo?window=7d&until=1m&server=thegram&target=0.99",
	} {
		status, _, body := do(t, "GET", srv.URL+path, "")
		if status != 200 {
			t.Errorf("%s: %d %s", path, status, body)
		}
	}
}
