package pipeline_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestClockAhead_StoredReusesRandom (rid23) is detect's
// TestClockAhead_KeysRandom through the pipeline and its SQLite store:
// uses of four request_ids with two intents and the server's refusals,
// from a right pod (a third of its calls late by up to allowed_lateness
// less 10 s) and one 2 minutes ahead, in random orders. The
// request_id_reuse findings the store holds open at the end are those the
// same calls judged in time order make (analyze), ids included: the
// withdrawals and replacements reach the store. Four seeds by default
// (MCPAUDIT_RANDOM_SEEDS for more); on main at e59700e seeds 0 to 3 all
// differ.
func TestClockAhead_StoredReusesRandom(t *testing.T) {
	seeds := 4
	if v := os.Getenv("MCPAUDIT_RANDOM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("MCPAUDIT_RANDOM_SEEDS=%q: %v", v, err)
		}
		seeds = n
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) { storedReuses(t, seed) })
	}
}

func storedReuses(t *testing.T, seed uint64) {
	const (
		patched = `{"isError":false,"structuredContent":{"path":"a.gram","rev":2,"hash":"h2","sync":{"state":"synced"}}}`
		reused  = `{"isError":true,"structuredContent":{"error":{"code":"E_REQUEST_REUSE","message":"request_id belongs to another intent"}},"content":[{"type":"text","text":"E_REQUEST_REUSE: request_id belongs to another intent"}]}`
	)
	rng := rand.New(rand.NewPCG(seed, 23))
	start := wallStart
	clock := newClock(start)
	window := func(c *detect.Config) { c.CorrelationWindow = 2 * time.Minute }
	cfg := detect.NewDefaultConfig()
	window(&cfg)
	r := openRunDetect(t, t.TempDir(), clock, nil, window, nil)
	pods := map[string]time.Duration{"pod-right": 0, "pod-ahead": 2 * time.Minute}
	rpc := 0
	var all [][]byte
	send := func(pod string, at time.Time, line func(at time.Time, rpc int) []byte) {
		rpc++
		l := line(at, rpc)
		all = append(all, l)
		if _, err := r.ingest(batch(t, pod, l)); err != nil {
			t.Fatal(err)
		}
	}
	patch := func(key, text, result string) func(time.Time, int) []byte {
		return func(at time.Time, rpc int) []byte {
			return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-%s","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","base_revision":1,"expected_hash":"h1","request_id":%q,"operations":[{"op":"append_block","target":"h0-1","text":%q}]}}},"response":{"jsonrpc":"2.0","id":%d,"result":%s}}`,
				at.Format(time.RFC3339Nano), text, rpc, key, text, rpc, result)
		}
	}
	// What the pods send, by the second of the run it arrives at: a call
	// dated a second before (by its pod's clock), or, late, up to
	// allowed_lateness less 10 s before that.
	type sent struct {
		pod  string
		late time.Duration
		line func(time.Time, int) []byte
	}
	plan := map[time.Duration][]sent{}
	late := int((cfg.AllowedLateness - 10*time.Second) / time.Second)
	for range 40 {
		s := time.Duration(10+rng.IntN(8*60)) * time.Second
		c := sent{pod: "pod-ahead"}
		if rng.IntN(2) == 0 {
			c.pod = "pod-right"
			if rng.IntN(3) == 0 {
				c.late = time.Duration(rng.IntN(late)) * time.Second
			}
		}
		result := patched
		if rng.IntN(3) == 0 {
			result = reused
		}
		c.line = patch(fmt.Sprint("rk-", rng.IntN(4)), fmt.Sprint("t", rng.IntN(2)), result)
		plan[s+c.late] = append(plan[s+c.late], c)
	}
	for s := time.Duration(0); s < 16*time.Minute; s += time.Second {
		clock.Add(time.Second)
		for _, c := range plan[s] {
			send(c.pod, clock.Now().Add(pods[c.pod]-time.Second-c.late), c.line)
		}
		if s%(5*time.Second) == 0 {
			for _, pod := range []string{"pod-right", "pod-ahead"} {
				send(pod, clock.Now().Add(pods[pod]-time.Second), func(at time.Time, rpc int) []byte { return callLine("thegram", "bg-"+pod, rpc, at) })
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
	var got, want []string
	for _, f := range o.findings {
		if d := describe(&f); strings.HasPrefix(d, "request_id_reuse ") {
			got = append(got, d)
		}
	}
	// In time order: analyze of the lines as sent would judge the late
	// ones late.
	slices.SortStableFunc(all, func(a, b []byte) int {
		return decode(t, [][]byte{a})[0].Call.Time.Compare(decode(t, [][]byte{b})[0].Call.Time)
	})
	for _, d := range analyzed(t, all, cfg).findings {
		if strings.HasPrefix(d, "request_id_reuse ") {
			want = append(want, d)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) == 0 {
		t.Fatal("no request_id_reuse in time order: the seed tests nothing")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("seed %d: request_id_reuse stored\n%q\nwant (analyze, in order)\n%q", seed, got, want)
	}
}
