package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestClockAhead_StoredPairs (ck22, after live22's D1 and D2) delivers to
// the pipeline, with its SQLite store, calls of three pods: one on time,
// one whose clock runs 2 minutes ahead and one 10 minutes slow. Among
// them, on thegram, a key used by the slow pod and refused 12 minutes
// later (by its date) from the pod ahead, and a key used by the pod ahead
// and refused, whose use by the right pod, dated before, comes after
// both; on oddlynew, two creates of one document by the pod ahead and an
// earlier one by the right pod that comes after them. The findings the
// store holds open at the end are those the same calls judged in time
// order make (analyze): the refusal alone where the key's use lies
// outside the correlation window, and each pair named with the call that
// is first in order. On main at ced7fc0 the store held the pairs made
// first.
func TestClockAhead_StoredPairs(t *testing.T) {
	start := wallStart
	clock := newClock(start)
	window := func(c *detect.Config) { c.CorrelationWindow = 2 * time.Minute }
	r := openRunDetect(t, t.TempDir(), clock, nil, window, nil)
	pods := map[string]time.Duration{"pod-right": 0, "pod-ahead": 2 * time.Minute, "pod-slow": -10 * time.Minute}
	rpc := 0
	var all [][]byte
	send := func(pod string, line func(at time.Time, rpc int) []byte) {
		rpc++
		l := line(clock.Now().Add(pods[pod]-time.Second), rpc)
		all = append(all, l)
		if _, err := r.ingest(batch(t, pod, l)); err != nil {
			t.Fatal(err)
		}
	}
	patch := func(key, text, result string) func(time.Time, int) []byte {
		return func(at time.Time, rpc int) []byte {
			return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-%s-%s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"%s.gram","base_revision":1,"expected_hash":"h1","request_id":%q,"operations":[{"op":"append_block","target":"h0-1","text":%q}]}}},"response":{"jsonrpc":"2.0","id":%d,"result":%s}}`,
				at.Format(time.RFC3339Nano), key, text, rpc, key, key, text, rpc, result)
		}
	}
	const (
		patched = `{"isError":false,"structuredContent":{"path":"a.gram","rev":2,"hash":"h2","sync":{"state":"synced"}}}`
		reused  = `{"isError":true,"structuredContent":{"error":{"code":"E_REQUEST_REUSE","message":"request_id belongs to another intent"}},"content":[{"type":"text","text":"E_REQUEST_REUSE: request_id belongs to another intent"}]}`
	)
	create := func(cid string) func(time.Time, int) []byte {
		return func(at time.Time, rpc int) []byte {
			return fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":"s-%s","client":"agent","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":%q}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":{"documentId":"doc_%s","action":"created","title":"Report","type":"note"},"logs":[],"calls":[{"tool":"documents.createDocument","outcome":"succeeded","count":1}]}}}}`,
				at.Format(time.RFC3339Nano), cid, rpc, fmt.Sprintf(`async () => await documents.createDocument({ creationId: %q, title: "Report", type: "note" })`, cid), rpc, cid)
		}
	}
	// What each pod sends at a second of the run, besides its reads.
	plan := map[time.Duration][]struct {
		pod  string
		line func(time.Time, int) []byte
	}{
		5 * time.Minute:                {{"pod-slow", patch("rk-old", "x", patched)}},
		5*time.Minute + 10*time.Second: {{"pod-ahead", patch("rk-old", "y", reused)}},
		8 * time.Minute:                {{"pod-ahead", patch("rk-swap", "x", patched)}},
		8*time.Minute + 20*time.Second: {{"pod-ahead", patch("rk-swap", "y", reused)}},
		9*time.Minute + 50*time.Second: {{"pod-right", patch("rk-swap", "x", patched)}},
		3*time.Minute + time.Second:    {{"pod-ahead", create("cid-b")}},
		4*time.Minute + 56*time.Second: {{"pod-ahead", create("cid-c")}},
		4*time.Minute + 58*time.Second: {{"pod-right", create("cid-a")}},
	}
	for s := time.Duration(0); s < 25*time.Minute; s += time.Second {
		clock.Add(time.Second)
		for _, c := range plan[s] {
			send(c.pod, c.line)
		}
		if s%(5*time.Second) == 0 {
			for _, pod := range []string{"pod-right", "pod-ahead", "pod-slow"} {
				for _, server := range []string{"thegram", "oddlynew"} {
					send(pod, func(at time.Time, rpc int) []byte { return callLine(server, "bg-"+pod, rpc, at) })
				}
			}
			r.status()
		}
	}
	parts := r.status()
	o := r.stop()
	for k, p := range parts {
		if p.TooLate != 0 {
			t.Fatalf("%v: %d calls too late: the test judges every call", k, p.TooLate)
		}
	}
	got := map[string]string{}
	for id, f := range o.findings {
		got[id] = describe(&f)
	}
	want := analyzed(t, all, func() detect.Config { c := detect.NewDefaultConfig(); window(&c); return c }())
	if !slices.Equal(values(got), values(want.findings)) {
		t.Fatalf("findings stored\n%q\nwant (analyze, in order)\n%q", values(got), values(want.findings))
	}
	if len(got) != 4 {
		t.Fatalf("%d findings, want 4 (rk-old alone, rk-swap, the duplicates cid-b and cid-c): %q", len(got), values(got))
	}
}
