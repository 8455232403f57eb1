package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServe_StoreReadyFollowsReadyz: serve --store clickhouse with the
// real server stopped and started again (live20's outage, shorter):
// /metrics says mcpaudit_store_ready 0 while /readyz answers 503, and 1
// when it answers 200 again, both from one check. Before, /readyz was the
// only place the outage showed (found from outside by live20).
func TestServe_StoreReadyFollowsReadyz(t *testing.T) {
	t.Parallel() // a ClickHouse server of its own
	dsn, ctl := privateClickHouse(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Serve.Store = "clickhouse"
	cfg.Serve.ClickHouse.DSN = dsn
	cfg.Serve.ClickHouse.Database = fmt.Sprintf("mcpaudit_ready_%d", time.Now().UnixNano())
	cfg.Serve.ClickHouse.BatchAge = 50 * time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := startTest(t, cfg)
	readyz := func() int {
		r, err := http.Get("http://" + s.apiAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r.StatusCode
	}
	// waitReadyz polls /readyz (the store pings ClickHouse every 5 s),
	// then reads the gauge: the server stays as it is meanwhile.
	waitReadyz := func(code int, gauge string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); readyz() != code; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz did not answer %d within a minute", code)
			}
		}
		if text := scrapeMetrics(t, s); !strings.Contains(text, "\nmcpaudit_store_ready "+gauge+"\n") {
			t.Errorf("/readyz answers %d, /metrics lacks mcpaudit_store_ready %s", code, gauge)
		}
	}
	waitReadyz(http.StatusOK, "1")
	ctl("stop")
	waitReadyz(http.StatusServiceUnavailable, "0")
	ctl("start")
	waitReadyz(http.StatusOK, "1")
}
