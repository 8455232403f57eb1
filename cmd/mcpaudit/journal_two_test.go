package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxy_Kill9TwoRelaysOneDir (rev17px): two proxy processes share a
// buffer directory and are both killed with SIGKILL while each has calls in
// flight; a third proxy started on the directory records every one of them
// once, without a response, and the answered calls once with theirs. px16
// tested two relays on one directory inside one process only.
func TestProxy_Kill9TwoRelaysOneDir(t *testing.T) {
	upstream, seen := holdingUpstream(t, func(id string) bool { return strings.HasPrefix(id, `"held`) }, 20)

	var mu sync.Mutex
	recorded := map[string][]bool{} // JSON-RPC id -> responded, per record
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		n := 0
		sc := bufio.NewScanner(zr)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var rec struct {
				Request struct {
					ID string `json:"id"`
				} `json:"request"`
				Response json.RawMessage `json:"response"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				mu.Lock()
				recorded[rec.Request.ID] = append(recorded[rec.Request.ID], rec.Response != nil)
				mu.Unlock()
				n++
			}
		}
		w.Write([]byte(`{"accepted":` + itoa(n) + `,"rejected":0}`))
	}))
	defer collector.Close()

	bufDir := filepath.Join(t.TempDir(), "buf")
	var childLog lockedBuffer
	start := proxyStarter(t, upstream.URL, "vault", collector.URL, bufDir, &childLog)
	call := func(addr, id string) {
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(
			`{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"vault_write","arguments":{"path":"`+id+`"}}}`))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	addrA, addrB := freePort(t), freePort(t)
	a, b := start(addrA), start(addrB)
	call(addrA, "done-a")
	call(addrB, "done-b")
	for _, c := range []struct{ addr, id string }{{addrA, "held-a1"}, {addrA, "held-a2"}, {addrB, "held-b1"}, {addrB, "held-b2"}} {
		go call(c.addr, c.id)
	}
	for held := 0; held < 4; {
		select {
		case id := <-seen:
			if strings.HasPrefix(id, `"held`) {
				held++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the held calls did not all reach the upstream:\n%s", childLog.String())
		}
	}
	a.Process.Signal(os.Kill)
	b.Process.Signal(os.Kill)
	a.Wait()
	b.Wait()

	c := start(freePort(t))
	defer func() { c.Process.Signal(os.Kill); c.Wait() }()
	want := map[string]bool{"done-a": true, "done-b": true, "held-a1": false, "held-a2": false, "held-b1": false, "held-b2": false}
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range want {
			if len(recorded[id]) == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(15 * time.Second); !complete() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	time.Sleep(time.Second) // a second copy would come now
	mu.Lock()
	defer mu.Unlock()
	var ids []string
	for id := range recorded {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for id, responded := range want {
		if got := recorded[id]; len(got) != 1 || got[0] != responded {
			t.Errorf("records of %s: responded %v; want one, responded %v\nall: %v", id, got, responded, recorded)
		}
	}
	if len(ids) != len(want) {
		t.Errorf("records of %v; want only %d ids", ids, len(want))
	}
	if t.Failed() {
		t.Logf("the proxies' logs:\n%s", childLog.String())
	}
	if js, _ := filepath.Glob(filepath.Join(bufDir, "*.journal")); len(js) != 1 {
		t.Errorf("journals left: %v; want only the live proxy's", js)
	}
}
