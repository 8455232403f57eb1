package detect

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// Random delivery orders of idempotency keys' uses (rid23). ck22 pinned
// request_id_reuse for the orders live22 met, and left the general case
// open: in 28 of 30 random orders of four keys from a right pod and one
// 2 minutes ahead, the reuses that stood named other calls than judging
// in time order. These tests deliver keys used with one and two intents,
// refused (E_REQUEST_REUSE), re-sent, and used more than
// correlation_window apart, from a right pod (a third of its calls late
// by up to allowed_lateness) and one ahead, and expect the findings that
// stand, ids included, to be those of the same calls judged in time order.
// The calls of the other rules that pair calls are among them: refusals
// re-sent unchanged (wasted_retry), timeouts re-sent under a new key with
// and without a read between (unsafe_retry, double_applied_write) and
// copy applies within a receipt's retryAfter (premature_retry).

// standing keeps the findings that stand by id: a finding withdrawn and
// made again stands.
type standing map[string]string

var _ audit.FindingWithdrawer = standing(nil)

func (standing) Call(*audit.Record)                   {}
func (standing) Write(*audit.Write, audit.WriteState) {}
func (s standing) Finding(f *audit.Finding)           { s[f.ID()] = f.ID() + " " + findingLine(f) }
func (s standing) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	delete(s, f.ID())
}

// of returns the findings of kind k that stand, sorted.
func (s standing) of(k audit.Kind) []string {
	var l []string
	for id, line := range s {
		if strings.HasPrefix(line, id+" "+string(k)+" ") {
			l = append(l, line)
		}
	}
	slices.Sort(l)
	return l
}

// randomKinds are the kinds the random orders compare.
var randomKinds = []audit.Kind{
	audit.KindRequestIDReuse, audit.KindWastedRetry, audit.KindPrematureRetry,
	audit.KindUnsafeRetry, audit.KindDoubleAppliedWrite, audit.KindDuplicateCreate,
}

// gramWrite returns a patch of path in session under request_id key,
// appending text on base revision base, answered with result (a JSON-RPC
// result), or with no answer (a timeout) when result is empty.
func gramWrite(session, key, path, text string, base int, result string) func(time.Time, int) string {
	return func(at time.Time, id int) string {
		args := fmt.Sprintf(`{"path":%q,"base_revision":%d,"expected_hash":"h%d","request_id":%q,"operations":[{"op":"append_block","target":"h0-1","text":%q}]}`, path, base, base, key, text)
		if result == "" {
			return fmt.Sprintf(`{"time":%q,"server":"thegram","session":%q,"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_patch","arguments":%s}},"duration_ms":30000,"transport_error":"timeout"}`,
				at.UTC().Format(time.RFC3339Nano), session, id, args)
		}
		return gramLine(at, id, session, "gram_patch", args, result)
	}
}

const gramArgument = `{"isError":true,"structuredContent":{"error":{"code":"E_ARGUMENT","message":"Unknown argument mode"}},"content":[{"type":"text","text":"E_ARGUMENT: Unknown argument mode"}]}`

// copyApply returns an apply of the copy op in session s, answered
// applying with a retryAfter of a minute after it, or completed.
func copyApply(op string, applying bool) func(time.Time, int) string {
	return func(at time.Time, id int) string {
		res := fmt.Sprintf(`{"operationId":%q,"state":"completed","failure":null,"nextAction":"done","retryAfter":null,"destinationDocumentId":"doc_c"}`, op)
		if applying {
			res = fmt.Sprintf(`{"operationId":%q,"state":"applying","failure":null,"nextAction":"wait_then_retry_apply","retryAfter":%q}`, op, at.Add(time.Minute).UTC().Format(time.RFC3339Nano))
		}
		return runLine(at, id, "s-"+op, fmt.Sprintf(`async () => await organizations.applyDocumentCopy({ operationId: %q, planToken: "pt_1" })`, op),
			fmt.Sprintf(`{"isError":false,"structuredContent":{"result":%s,"logs":[],"calls":[{"tool":"organizations.applyDocumentCopy","outcome":"succeeded","count":1}]}}`, res))
	}
}

// randomKeyCalls returns the calls of one random run: about n uses of
// four request_ids over 12 minutes with two intents each, refusals,
// re-sends, timeouts and reads, copy applies and creates, from a right
// pod and one 2 minutes ahead.
func randomKeyCalls(cfg Config, seed uint64, n int) []podCall {
	rng := rand.New(rand.NewPCG(seed, 23))
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	var s podCalls
	s.background("thegram", t0, t0.Add(16*time.Minute), podRight, podAhead)
	s.background("oddlynew", t0, t0.Add(16*time.Minute), podRight, podAhead)
	late := int((cfg.AllowedLateness - 10*time.Second) / time.Second)
	for i := range n {
		// Bursts: most uses of a key lie within the window of another,
		// some more than a window apart.
		wall := t0.Add(time.Duration(10+rng.IntN(12*60)) * time.Second)
		p := podAhead
		if rng.IntN(2) == 0 {
			p = podRight
			if rng.IntN(3) == 0 {
				wall = wall.Add(time.Duration(rng.IntN(late)) * time.Second)
			}
		}
		key := fmt.Sprintf("rk-%d", rng.IntN(4))
		text := fmt.Sprint("t", rng.IntN(2))
		session := "s-" + text
		switch r := rng.IntN(20); {
		case r < 9:
			s.add(p, wall, gramWrite(session, key, "a.gram", text, 1, gramPatched))
		case r < 12:
			s.add(p, wall, gramWrite(session, key, "a.gram", text, 1, gramReused))
		case r < 13:
			s.add(p, wall, gramWrite(session, key, "a.gram", text, 1, gramArgument))
		case r < 15:
			// A timeout, or a re-send of its intent under a new key (on
			// a later base: a double application if the first landed).
			if rng.IntN(2) == 0 {
				s.add(p, wall, gramWrite(session, key, "b.gram", text, 1, ""))
			} else {
				s.add(p, wall, gramWrite(session, fmt.Sprint("nk-", i), "b.gram", text, 1+rng.IntN(2), gramPatched))
			}
		case r < 16:
			s.add(p, wall, func(at time.Time, id int) string {
				return gramLine(at, id, session, "gram_read", `{"path":"b.gram"}`,
					`{"isError":false,"structuredContent":{"path":"b.gram","rev":2,"hash":"h2","sync":{"state":"synced"}}}`)
			})
		case r < 18:
			s.add(p, wall, copyApply(fmt.Sprint("op_", rng.IntN(2)), rng.IntN(4) != 0))
		default:
			s.add(p, wall, createDoc(fmt.Sprint("cid-", i), fmt.Sprint("doc_", i)))
		}
	}
	return s.calls
}

// randomSeeds returns how many seeds the random orders run:
// MCPAUDIT_RANDOM_SEEDS, or def.
func randomSeeds(t *testing.T, def int) int {
	if v := os.Getenv("MCPAUDIT_RANDOM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("MCPAUDIT_RANDOM_SEEDS=%q: %v", v, err)
		}
		return n
	}
	return def
}

// TestClockAhead_KeysRandom delivers random runs (randomKeyCalls) live
// and judges them in time order: for every kind the findings that stand
// are the same, ids included. It counts the orders that differ by kind,
// logs them, and fails naming the first seed of each kind. On main's
// detector before rid23, 53 of 60 orders differ in request_id_reuse;
// before rnd24, 236 of 300 in double_applied_write; before rnd25, 24 of
// 300 in unsafe_retry and 5 in wasted_retry.
func TestClockAhead_KeysRandom(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	seeds := randomSeeds(t, 60)
	held := randomKinds
	differ := map[audit.Kind][]uint64{}
	made := map[audit.Kind]int{}
	withdrawn := 0
	for seed := range uint64(seeds) {
		calls := randomKeyCalls(cfg, seed, 60)
		live, inOrder := standing{}, standing{}
		withdrawn += judgeBoth(t, cfg, calls, live, inOrder)
		for _, k := range randomKinds {
			got, want := live.of(k), inOrder.of(k)
			made[k] += len(want)
			if !slices.Equal(got, want) {
				if len(differ[k]) == 0 && slices.Contains(held, k) {
					t.Errorf("seed %d: %s live, a pod ahead and late calls:\n%s\nin time order:\n%s", seed, k, lines(got), lines(want))
				}
				differ[k] = append(differ[k], seed)
			}
		}
	}
	for _, k := range randomKinds {
		t.Logf("%s: %d of %d orders differ (%d findings in time order) %v", k, len(differ[k]), seeds, made[k], differ[k])
	}
	if made[audit.KindRequestIDReuse] == 0 || withdrawn == 0 {
		t.Fatalf("%d reuses, %d findings withdrawn: the test does not test a replacement", made[audit.KindRequestIDReuse], withdrawn)
	}
}

// judgeBoth delivers calls to an engine with a clock per partition in
// order of arrival, ticking its wall clock, into live, and judges the same
// calls in time order (analyze) into inOrder, as judgeLiveAndInOrder
// does; it returns how many findings were withdrawn live.
func judgeBoth(t *testing.T, cfg Config, calls []podCall, live, inOrder standing) int {
	t.Helper()
	rd := dialect.NewReader(dialect.Config{})
	calls = slices.Clone(calls)
	slices.SortStableFunc(calls, func(a, b podCall) int { return a.arr.Compare(b.arr) })
	var withdrawn counted
	e := NewEngine(cfg, live, &withdrawn)
	e.ClockPerPartition()
	for _, c := range calls {
		e.Add(c.src, leanRecord(t, rd, c.line), c.arr)
		e.Tick(c.arr)
	}
	if n := e.Stats().TooLate; n != 0 {
		t.Fatalf("%d calls too late: the test judges every call", n)
	}
	e.Flush()
	dated := map[string]time.Time{}
	for _, c := range calls {
		dated[string(c.line)] = eventTime(t, rd, c.line)
	}
	slices.SortStableFunc(calls, func(a, b podCall) int { return dated[string(a.line)].Compare(dated[string(b.line)]) })
	e = NewEngine(cfg, inOrder)
	for _, c := range calls {
		e.Add("analyze", leanRecord(t, rd, c.line), time.Time{})
	}
	e.Flush()
	return int(withdrawn)
}

// counted counts the findings withdrawn.
type counted int

func (*counted) Call(*audit.Record)                                  {}
func (*counted) Write(*audit.Write, audit.WriteState)                {}
func (*counted) Finding(*audit.Finding)                              {}
func (c *counted) WithdrawFinding(*audit.Finding, string, time.Time) { *c++ }

// addAt delivers at arr, from p, the call line returns for the time at
// (by p's clock) and its JSON-RPC id.
func (s *podCalls) addAt(p clockPod, at, arr time.Time, line func(at time.Time, id int) string) {
	s.id++
	s.calls = append(s.calls, podCall{p.src, []byte(line(at, s.id)), arr})
}

// TestReuse_LateOrders pins, order by order, what the random orders found
// on main's detector (rid23): the findings that stand are those of time
// order, named with the same calls.
func TestReuse_LateOrders(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	w := t0.Add(2 * time.Minute)
	f := func(name string, want int, add func(s *podCalls)) {
		t.Run(name, func(t *testing.T) {
			var s podCalls
			s.background("thegram", t0, t0.Add(10*time.Minute), podRight)
			add(&s)
			live, inOrder := standing{}, standing{}
			judgeBoth(t, cfg, s.calls, live, inOrder)
			got, in := live.of(audit.KindRequestIDReuse), inOrder.of(audit.KindRequestIDReuse)
			if !slices.Equal(got, in) {
				t.Fatalf("request_id_reuse live:\n%s\nin time order:\n%s", lines(got), lines(in))
			}
			if len(got) != want {
				t.Fatalf("%d reuses, want %d:\n%s", len(got), want, lines(got))
			}
		})
	}
	// The key bound to x; its second intent y used at +30 s and again at
	// +60 s, the use at +30 s delivered late after the one at +60 s. In
	// order the reuse is reported once, with the first use of y: on main
	// the pair made with the use at +60 s stood, and the use judged late,
	// its intent reported already, made nothing.
	f("intent_reported_late_first", 1, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(60*time.Second), w.Add(61*time.Second), gramWrite("s", "rk", "a.gram", "y", 1, gramPatched))
		s.addAt(podRight, w.Add(30*time.Second), w.Add(90*time.Second), gramWrite("s", "rk", "a.gram", "y", 1, gramPatched))
	})
	// The server refuses y at +60 s (E_REQUEST_REUSE), named with the
	// binder x; a use of y at +30 s, delivered after the refusal, is the
	// reuse judging in order reports, and the refusal of an intent
	// reported already makes nothing.
	f("refusal_after_late_reuse", 1, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(60*time.Second), w.Add(61*time.Second), gramWrite("s", "rk", "a.gram", "y", 1, gramReused))
		s.addAt(podRight, w.Add(30*time.Second), w.Add(90*time.Second), gramWrite("s", "rk", "a.gram", "y", 1, gramPatched))
	})
	// A key idle for more than the window and re-sent with its intent x
	// (+150 s) binds anew, and y 10 s later is a reuse of it. Both come
	// late, after the watermark passed the key's first use by
	// correlation_window + allowed_lateness: on main serve had forgotten
	// the key and reported the pair, and analyze, the key remembered, did
	// not (whether it did depended on when it swept the key).
	f("idle_key_binds_anew", 1, func(s *podCalls) {
		s.addAt(podRight, w, w.Add(time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(150*time.Second), w.Add(265*time.Second), gramWrite("s", "rk", "a.gram", "x", 1, gramPatched))
		s.addAt(podRight, w.Add(160*time.Second), w.Add(266*time.Second), gramWrite("s", "rk", "a.gram", "y", 1, gramPatched))
	})
}
