package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestWebStatusLine: the status line at the top of the page shows the
// pipeline's lag and the partitions behind, as mcpaudit status does,
// instead of "n/a" (docs/web.md: "max lag, partitions behind, watermark").
// One call delivered 10 minutes after its time, judged, nothing waiting:
// since op20b (op20's D4) its partition is not behind and its lag is told
// as its last delivery's, not as the max lag of what waits.
func TestWebStatusLine(t *testing.T) {
	s := startTest(t, testConfig(t, t.TempDir()))
	at := time.Now().Add(-10 * time.Minute).UTC()
	line := fmt.Sprintf(`{"time":%q,"server":"thegram","session":"s1","request":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"duration_ms":5,"response":{"jsonrpc":"2.0","id":1,"result":{"isError":false,"structuredContent":{"projects":[]}}}}`,
		at.Format(time.RFC3339Nano))
	resp := postCalls(t, s, []byte(line+"\n"), false)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/calls: %s", resp.Status)
	}
	waitStatus(t, s, func(st api.StatusResponse) bool {
		return len(st.Partitions) == 1 && st.Partitions[0].Watermark != nil
	})
	resp, err := http.Get("http://" + s.apiAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lag := regexp.MustCompile(`max lag <b id="max-lag">([^<]*)</b>`).FindSubmatch(b)
	behind := regexp.MustCompile(`partitions behind <b>([^<]*)</b>`).FindSubmatch(b)
	quiet := regexp.MustCompile(`last delivery late by <b>([^<]*)</b> \(thegram\)`).FindSubmatch(b)
	if lag == nil || behind == nil || quiet == nil {
		t.Fatalf("the page has no status line:\n%s", b)
	}
	if d, err := time.ParseDuration(string(quiet[1])); err != nil || d < 9*time.Minute {
		t.Errorf("last delivery late by %q; want about 10m, the partition's lag", quiet[1])
	}
	if string(lag[1]) != "0s" || string(behind[1]) != "0" {
		t.Errorf("max lag %q, partitions behind %q; want 0s and 0: nothing waits", lag[1], behind[1])
	}
}
