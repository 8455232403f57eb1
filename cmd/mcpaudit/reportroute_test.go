package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServe_ReportRoute: serve's /api/v1/report answers another method
// than GET with 405 and Allow, as the other endpoints of the API do (it
// fell through to the API's 404 before), and a parameter it does not take
// with 400.
func TestServe_ReportRoute(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	for _, tc := range []struct {
		method, query string
		status        int
		says          string
	}{
		{"POST", "", 405, "method POST not allowed on /api/v1/report; allowed: GET, HEAD"},
		{"GET", "?windw=7d", 400, `unknown parameter \"windw\"`},
		{"GET", "?window=7d&until=1h&format=md", 200, "# "},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+s.apiAddr+"/api/v1/report"+tc.query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.says) {
			t.Errorf("%s /api/v1/report%s: %d %s, want %d saying %q", tc.method, tc.query, resp.StatusCode, b, tc.status, tc.says)
		}
		if tc.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: Allow %q, want GET, HEAD", tc.method, resp.Header.Get("Allow"))
		}
	}
}
