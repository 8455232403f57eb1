package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpaudit/mcpaudit/collector/proxy"
	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/forward"
)

// BenchmarkProxy_AddedLatency sends tools/call requests at 1,000 per second,
// taking turns between the upstream directly and the proxy in front of it
// (which records every exchange and ships it through the forwarder's disk
// buffer to a collector), and reports the latency percentiles of both. The
// upstream is the go-sdk Streamable HTTP server answering with SSE.
//
//	go test ./collector/proxy -run '^$' -bench AddedLatency -benchtime 20000x
//
// Run it on a quiet machine: on a busy one the figures measure the queue
// for the CPU.
func BenchmarkProxy_AddedLatency(b *testing.B) {
	srv := testServer()
	b.Run("upstream=go-sdk", func(b *testing.B) {
		benchAddedLatency(b, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	})
	// A minimal upstream costs the machine little, so that the figure is
	// the proxy's more than the server's.
	b.Run("upstream=minimal", func(b *testing.B) { benchAddedLatency(b, minimalUpstream()) })
}

// minimalUpstream answers every request at once as the go-sdk server
// would: initialize with a session, notifications with 202, and
// tools/call with one SSE event echoing its text.
func minimalUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ms, _ := tap.Parse(body)
		if len(ms) == 0 || ms[0].Kind != tap.KindRequest {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		if ms[0].Method == "initialize" {
			w.Header().Set("Mcp-Session-Id", "S1")
		}
		var p struct {
			Arguments struct{ Text string } `json:"arguments"`
		}
		json.Unmarshal(ms[0].Params, &p)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":%q}]}}\n\n", ms[0].ID, p.Arguments.Text)
	})
}

func benchAddedLatency(b *testing.B, upstream http.Handler) {
	up := httptest.NewServer(upstream)
	defer up.Close()
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, `{"accepted":1}`)
	}))
	defer collector.Close()
	fcfg := forward.NewDefaultConfig()
	fcfg.URL, fcfg.Source, fcfg.BufferDir = collector.URL, "bench", b.TempDir()
	f, err := forward.New(fcfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close(context.Background())
	cfg := proxy.NewDefaultConfig()
	cfg.Upstream, cfg.Server = up.URL, "thegram"
	// As mcpaudit proxy wires it (without redaction): the journal of the
	// requests in flight, a line when each starts and when it is buffered.
	j := f.Journal()
	p, err := proxy.New(cfg, func(r *tap.Record) {
		f.Record(r)
		if j != nil && r.Entry != 0 {
			j.End(r.Entry)
		}
	}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if j != nil {
		p.Recorder().SetJournal(benchJournal{j})
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, MaxConnsPerHost: 32}}
	sid := func(base string) string {
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(
			`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		s := resp.Header.Get("Mcp-Session-Id")
		post(context.Background(), client, base+"/mcp", s, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return s
	}
	targets := []struct {
		base, sid string
		lat       []time.Duration
	}{{base: up.URL}, {base: front.URL}}
	for i := range targets {
		targets[i].sid = sid(targets[i].base)
	}
	// Open loop: each call leaves at its time whatever the others do, so a
	// slow answer cannot hide the ones it would have delayed.
	// The targets take turns in blocks of half a second, so that each is
	// driven at 1,000/s alone while machine noise falls on both.
	const interval, block = time.Millisecond, 500
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		t := &targets[i/block%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"patch %d"}}}`, i+1, i)
			t0 := time.Now()
			code, resp, err := post(context.Background(), client, t.base+"/mcp", t.sid, body)
			if err != nil || code != 200 || !strings.Contains(resp, "patch") {
				b.Errorf("call %d: %d %v %q", i, code, err, resp)
			}
			lat[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	for i, l := range lat {
		targets[i/block%2].lat = append(targets[i/block%2].lat, l)
	}
	b.StopTimer()
	pct := func(l []time.Duration, q float64) float64 {
		s := slices.Clone(l)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	if len(targets[1].lat) == 0 {
		return
	}
	d, pr := targets[0].lat, targets[1].lat
	b.ReportMetric(pct(d, 0.5), "direct-p50-ms")
	b.ReportMetric(pct(d, 0.99), "direct-p99-ms")
	b.ReportMetric(pct(pr, 0.5), "proxied-p50-ms")
	b.ReportMetric(pct(pr, 0.99), "proxied-p99-ms")
	b.ReportMetric(pct(pr, 0.99)-pct(d, 0.99), "added-p99-ms")
	b.ReportMetric(pct(pr, 0.5)-pct(d, 0.5), "added-p50-ms")
}

// benchJournal writes a request in flight to the forwarder's journal, as
// mcpaudit proxy does.
type benchJournal struct{ j *forward.Journal }

func (b benchJournal) Begin(entry uint64, r *tap.Record) { b.j.Begin(entry, r.AppendJSON(nil)) }
func (b benchJournal) End(entry uint64)                  { b.j.End(entry) }
