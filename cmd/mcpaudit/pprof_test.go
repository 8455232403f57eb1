package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestServe_PprofAuth: with --pprof and authentication on, the profiles
// (the execution trace among them)
// need a credential of the debug scope: none or an unknown one is answered
// 401 with WWW-Authenticate, a known one without the scope 403 (a query or
// metrics credential of every tenant included); with authentication off
// they stay open.
func TestServe_PprofAuth(t *testing.T) {
	const tokDebug = "mcpa_debug_0123456789"
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte(tokensLine("oncall-acme", "acme", "query", tokQueryAcme)+
		tokensLine("agents-acme", "acme", "ingest", tokIngestAcme)+
		tokensLine("ops", "*", "query,metrics", tokOps)+
		tokensLine("profiler", "*", "debug", tokDebug)), 0o600)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Auth.TokensFile = tokens
	cfg.Serve.pprof = true
	s := startTest(t, cfg)
	c := &http.Client{}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		for _, tc := range []struct {
			name, token string
			status      int
		}{
			{"no_token", "", 401},
			{"wrong_token", "mcpa_wrong", 401},
			{"query_of_one_tenant", tokQueryAcme, 403},
			{"ingest", tokIngestAcme, 403},
			{"query_metrics_of_every_tenant", tokOps, 403},
			{"debug", tokDebug, 200},
		} {
			req, _ := http.NewRequest("GET", "http://"+s.apiAddr+path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := tc.status
			if resp.StatusCode != want {
				t.Errorf("%s %s: %d, want %d", path, tc.name, resp.StatusCode, want)
			}
			if want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s: 401 without WWW-Authenticate", path, tc.name)
			}
		}
	}

	t.Run("auth_off", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.Serve.pprof = true
		s := startTest(t, cfg)
		resp, err := http.Get("http://" + s.apiAddr + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("/debug/pprof/ with authentication off: %d, want 200", resp.StatusCode)
		}
	})
}
