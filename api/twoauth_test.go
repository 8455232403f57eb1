package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/mcpaudit/mcpaudit/api"
)

// TestAuth_TwoAuthorizations: a query with two Authorization headers is
// refused 401 saying so, whichever token comes first, as ingest refuses
// it: the first was used without a word (adv22 K).
func TestAuth_TwoAuthorizations(t *testing.T) {
	hs, _ := newCallServer(t)
	for _, toks := range [][]string{{"tok-acme", "tok-unknown"}, {"tok-unknown", "tok-acme"}, {"tok-acme", "tok-acme"}} {
		req, _ := http.NewRequest("GET", hs.URL+"/api/v1/calls", nil)
		for _, tok := range toks {
			req.Header.Add("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e api.Error
		json.Unmarshal(b, &e)
		if resp.StatusCode != 401 || e.Error != "2 Authorization headers: send one credential" {
			t.Errorf("%v: %d %s, want 401 naming the two headers", toks, resp.StatusCode, b)
		}
	}
	if status, _, body := do(t, "GET", hs.URL+"/api/v1/calls", "tok-acme"); status != 200 {
		t.Errorf("one header: %d %s, want 200", status, body)
	}
}
