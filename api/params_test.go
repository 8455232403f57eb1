package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

func TestParseWindow(t *testing.T) {
	f := func(in string, want time.Duration, wantErr bool) {
		t.Helper()
		got, err := api.ParseWindow(in)
		if (err != nil) != wantErr || got != want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v, error %v", in, got, err, want, wantErr)
		}
	}
	f("1h", time.Hour, false)
	f("30d", 30*24*time.Hour, false)
	f("2w", 14*24*time.Hour, false)
	f("0.5d", 12*time.Hour, false)
	f("36500d", api.MaxWindow, false)
	f("36501d", 0, true)
	f("1e300d", 0, true)
	f("1e300w", 0, true)
	f("NaNd", 0, true)
	f("Infd", 0, true)
	f("-1d", 0, true)
	f("0d", 0, true)
	f("1000000h", 0, true)
	f("9999999999999h", 0, true)
	f("", 0, true)
	f("d", 0, true)
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	f := func(in string, want time.Time, wantErr bool) {
		t.Helper()
		got, err := api.ParseTime(in, now)
		if (err != nil) != wantErr || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, error %v", in, got, err, want, wantErr)
		}
	}
	at := func(h, m, s, ms int) time.Time { return time.Date(2026, 12, 4, h, m, s, ms*1e6, time.UTC) }
	f("2026-12-04T14:02:05.123Z", at(14, 2, 5, 123), false)
	f("2026-12-04T15:02:05+01:00", at(14, 2, 5, 0), false)
	f("2026-12-04 15:02:05+01:00", at(14, 2, 5, 0), false)
	f("2026-12-04 14:02:05.123", at(14, 2, 5, 123), false) // as the page shows it, UTC
	f("2026-12-04T14:02:05", at(14, 2, 5, 0), false)
	f("2026-12-04 14:02", at(14, 2, 0, 0), false)
	f("2026-12-04T14:02", at(14, 2, 0, 0), false) // an <input type="datetime-local">
	f("2026-12-04", at(0, 0, 0, 0), false)
	f("1h", at(14, 0, 0, 0), false)
	f("14:02", time.Time{}, true)
	f("2026-13-01 14:02", time.Time{}, true)
	f("2300-01-01 00:00", time.Time{}, true)
	f("yesterday", time.Time{}, true)
}

func TestParseTarget(t *testing.T) {
	f := func(in string, allowOne bool, want float64, wantErr bool) {
		t.Helper()
		got, err := api.ParseTarget(in, allowOne)
		if (err != nil) != wantErr || got != want {
			t.Errorf("ParseTarget(%q, %v) = %v, %v; want %v, error %v", in, allowOne, got, err, want, wantErr)
		}
	}
	f("0.999", true, 0.999, false)
	f("1", true, 1, false)
	f("1", false, 0, true)
	f("NaN", true, 0, true)
	f("nan", true, 0, true)
	f("Inf", true, 0, true)
	f("-Inf", true, 0, true)
	f("0", true, 0, true)
	f("1.5", true, 0, true)
	f("1e-400", true, 0, true)
}

// TestBadParameters: a target or window that is not a number in range, and
// a time the store cannot hold, are answered 400 with the parameter named.
func TestBadParameters(t *testing.T) {
	srv, _ := newServer(t, nil)
	for _, tc := range []struct{ path, param string }{
		{"/api/v1/slo?target=NaN", "target"},
		{"/api/v1/slo?target=Inf", "target"},
		{"/api/v1/slo?target=-0.5", "target"},
		{"/api/v1/slo?window=1e300d", "window"},
		{"/api/v1/slo?window=NaNd", "window"},
		{"/api/v1/slo?window=100000000h", "window"},
		{"/api/v1/slo?until=9999-01-01T00:00:00Z", "until"},
		{"/api/v1/findings?since=0001-01-01T00:00:00Z", "since"},
		{"/api/v1/writes?until=2300-01-01T00:00:00Z", "until"},
		// An empty range or a parameter given twice is a mistake that an
		// empty answer would hide.
		{"/api/v1/findings?since=1h&until=2h", "until"},
		{"/api/v1/calls?since=2026-11-02T10:00:00Z&until=2026-11-02T09:00:00Z", "until"},
		{"/api/v1/writes?since=2026-11-02T10:00:00Z&until=2026-11-02T09:00:00Z", "until"},
		{"/api/v1/documents/ops%2Fa.gram/timeline?since=1h&until=2h", "until"},
		{"/api/v1/findings/counts?since=1h&until=2h", "until"},
		{"/api/v1/findings?kind=unsafe_retry&kind=double_applied_write", "kind"},
		{"/api/v1/calls?since=1h&since=2h", "since"},
	} {
		status, _, body := do(t, "GET", srv.URL+tc.path, "")
		var e api.Error
		json.Unmarshal(body, &e)
		if status != 400 || !strings.Contains(e.Error, tc.param) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.path, status, body, tc.param)
		}
	}
}

// TestBadParameters_EchoTheValue: a refused severity or state names the
// value it refused, as kind and order do, so that a typo (warn, acked) is
// seen at once. Found by op19: "parameter severity: want info, warning or
// critical" did not say what had been given.
func TestBadParameters_EchoTheValue(t *testing.T) {
	srv, _ := newServer(t, nil)
	f := func(path, want string) {
		t.Helper()
		status, _, body := do(t, "GET", srv.URL+path, "")
		var e api.Error
		json.Unmarshal(body, &e)
		if status != 400 || !strings.Contains(e.Error, want) {
			t.Errorf("%s: %d %s, want 400 saying %s", path, status, body, want)
		}
	}
	f("/api/v1/findings?severity=warn", `parameter severity: want info, warning or critical, not "warn"`)
	f("/api/v1/findings?state=acked", `parameter state: want open, acknowledged, resolved or withdrawn, not "acked"`)
	f("/api/v1/findings/counts?severity=high", `not "high"`)
}

// TestTenantConflict: a credential of one tenant naming another in the
// tenant parameter or a tenant header is refused with 403; naming its own
// is fine; nothing of the other tenant is answered.
func TestTenantConflict(t *testing.T) {
	srv, logs := newServer(t, map[string]string{"tok-acme": "acme"})
	for _, tc := range []struct {
		path, header string
		status       int
	}{
		{"/api/v1/findings?tenant=globex", "", 403},
		{"/api/v1/findings", "globex", 403},
		{"/api/v1/slo?tenant=globex", "", 403},
		{"/api/v1/status?tenant=globex", "", 403},
		{"/api/v1/findings?tenant=acme", "acme", 200},
	} {
		req, _ := http.NewRequest("GET", srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer tok-acme")
		if tc.header != "" {
			req.Header.Set("X-Scope-OrgID", tc.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s (header %q): %d %s, want %d", tc.path, tc.header, resp.StatusCode, body.String(), tc.status)
		}
		if tc.status == 403 && strings.Contains(body.String(), "ops/a.gram") {
			t.Errorf("%s: the refusal leaks data: %s", tc.path, body.String())
		}
	}
	if !strings.Contains(logs.String(), "tenant_conflict") || strings.Contains(logs.String(), "tok-acme") {
		t.Errorf("logs: want tenant_conflict lines without the token:\n%s", logs)
	}
}

// FuzzParseWindow: no text makes the window parser panic, and a window it
// accepts is positive and at most MaxWindow.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"30d", "1e300d", "NaNw", "1h30m", "-1d", "0.5w"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := api.ParseWindow(s)
		if err == nil && (d <= 0 || d > api.MaxWindow) {
			t.Fatalf("ParseWindow(%q) = %v", s, d)
		}
		if v, err := api.ParseTarget(s, true); err == nil && !(v > 0 && v <= 1) {
			t.Fatalf("ParseTarget(%q) = %v", s, v)
		}
	})
}
