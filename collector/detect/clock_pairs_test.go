package detect

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// The pairs a call from a clock that runs ahead is named in (ck22, after
// live22's D1 and D2). live22 sent calls from five OTel SDK providers, one
// 2 minutes ahead and one 10 minutes behind; serve's findings were
// analyze's by kind, key and document, but 27 of 400 request_id_reuse and
// 101 of 598 duplicate_create named other calls. These tests deliver such
// calls to an engine with a clock per partition, as serve does, and judge
// the same calls in time order, as analyze does: the findings that stand,
// with their ids, are the same.

// clockPod is one exporter: its source and how far its clock is off.
type clockPod struct {
	src string
	off time.Duration
}

var (
	podRight = clockPod{"otlp:right", 0}
	podAhead = clockPod{"otlp:ahead", 2 * time.Minute}
	podSlow  = clockPod{"otlp:slow", -10 * time.Minute}
)

// podCall is a call as a pod delivers it: the line, dated by the pod's
// clock, and the wall time it reaches the collector.
type podCall struct {
	src  string
	line []byte
	arr  time.Time
}

// podCalls builds the calls of a run, call by call.
type podCalls struct {
	calls []podCall
	id    int
}

// add delivers at wall, from p, the call that line returns for the time
// it is dated (a second before wall, by p's clock) and its JSON-RPC id.
func (s *podCalls) add(p clockPod, wall time.Time, line func(at time.Time, id int) string) {
	s.id++
	s.calls = append(s.calls, podCall{p.src, []byte(line(wall.Add(p.off-time.Second), s.id)), wall})
}

// background has each pod deliver a read of a document of its own every
// 5 s from start to end on server, so that every source stays active and
// the partition's watermark is the slowest clock's.
func (s *podCalls) background(server string, start, end time.Time, pods ...clockPod) {
	for wall := start; wall.Before(end); wall = wall.Add(5 * time.Second) {
		for _, p := range pods {
			s.add(p, wall, func(at time.Time, id int) string {
				if server == "thegram" {
					return gramLine(at, id, "bg", "gram_read", fmt.Sprintf(`{"path":"bg/%d.gram"}`, id),
						fmt.Sprintf(`{"isError":false,"structuredContent":{"path":"bg/%d.gram","rev":1,"hash":"h1","sync":{"state":"synced"}}}`, id))
				}
				return runLine(at, id, "bg", fmt.Sprintf(`async () => await documents.getDocument({ documentId: \"doc_bg%d\" })`, id),
					fmt.Sprintf(`{"isError":false,"structuredContent":{"result":{"documentId":"doc_bg%d","title":"bg","type":"note","writeBasis":"wb"},"logs":[],"calls":[{"tool":"documents.getDocument","outcome":"succeeded","count":1}]}}`, id))
			})
		}
	}
}

func gramLine(at time.Time, id int, session, tool, args, result string) string {
	return fmt.Sprintf(`{"time":%q,"server":"thegram","session":%q,"request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}},"response":{"jsonrpc":"2.0","id":%d,"result":%s}}`,
		at.UTC().Format(time.RFC3339Nano), session, id, tool, args, id, result)
}

func runLine(at time.Time, id int, session, js, result string) string {
	return fmt.Sprintf(`{"time":%q,"server":"oddlynew","session":%q,"client":"agent","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":%q}}},"response":{"jsonrpc":"2.0","id":%d,"result":%s}}`,
		at.UTC().Format(time.RFC3339Nano), session, id, js, id, result)
}

// gramPatch returns a patch of path under request_id key appending text,
// answered with result.
func gramPatch(key, path, text, result string) func(time.Time, int) string {
	return func(at time.Time, id int) string {
		return gramLine(at, id, "s-"+key+"-"+text, "gram_patch",
			fmt.Sprintf(`{"path":%q,"base_revision":1,"expected_hash":"h1","request_id":%q,"operations":[{"op":"append_block","target":"h0-1","text":%q}]}`, path, key, text), result)
	}
}

const (
	gramPatched = `{"isError":false,"structuredContent":{"path":"a.gram","rev":2,"hash":"h2","sync":{"state":"synced"}}}`
	gramReused  = `{"isError":true,"structuredContent":{"error":{"code":"E_REQUEST_REUSE","message":"request_id belongs to another intent"}},"content":[{"type":"text","text":"E_REQUEST_REUSE: request_id belongs to another intent"}]}`
)

// createDoc returns a create of the document "Report" under creationId
// cid, answered created as doc, in a session of its own (one client: the
// spec's "in one session or one client").
func createDoc(cid, doc string) func(time.Time, int) string {
	return func(at time.Time, id int) string {
		return runLine(at, id, "s-"+cid, fmt.Sprintf(`async () => await documents.createDocument({ creationId: %q, title: "Report", type: "note" })`, cid),
			fmt.Sprintf(`{"isError":false,"structuredContent":{"result":{"documentId":%q,"action":"created","title":"Report","type":"note"},"logs":[],"calls":[{"tool":"documents.createDocument","outcome":"succeeded","count":1}]}}`, doc))
	}
}

// idLog keeps the findings made and withdrawn by id.
type idLog struct {
	made      map[string]string
	withdrawn []string
}

var _ audit.FindingWithdrawer = (*idLog)(nil)

func (*idLog) Call(*audit.Record)                   {}
func (*idLog) Write(*audit.Write, audit.WriteState) {}
func (s *idLog) Finding(f *audit.Finding) {
	if s.made == nil {
		s.made = map[string]string{}
	}
	s.made[f.ID()] = f.ID() + " " + findingLine(f)
}

func (s *idLog) WithdrawFinding(f *audit.Finding, _ string, _ time.Time) {
	s.withdrawn = append(s.withdrawn, f.ID())
}

// open returns the findings of kinds made and not withdrawn, sorted.
func (s *idLog) open(kinds ...audit.Kind) []string {
	var open []string
	for id, l := range s.made {
		if slices.Contains(s.withdrawn, id) {
			continue
		}
		for _, k := range kinds {
			if len(l) > len(id)+1+len(k) && l[len(id)+1:len(id)+1+len(k)] == string(k) {
				open = append(open, l)
			}
		}
	}
	slices.Sort(open)
	return open
}

// judgeLiveAndInOrder delivers calls to an engine with a clock per
// partition in order of arrival, ticking its wall clock, and judges the
// same calls in time order (analyze); it returns both logs.
func judgeLiveAndInOrder(t *testing.T, cfg Config, calls []podCall) (live, inOrder *idLog) {
	t.Helper()
	rd := dialect.NewReader(dialect.Config{})
	calls = slices.Clone(calls)
	slices.SortStableFunc(calls, func(a, b podCall) int { return a.arr.Compare(b.arr) })
	live = &idLog{}
	e := NewEngine(cfg, live)
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
	inOrder = &idLog{}
	e = NewEngine(cfg, inOrder)
	for _, c := range calls {
		e.Add("analyze", leanRecord(t, rd, c.line), time.Time{})
	}
	e.Flush()
	return live, inOrder
}

// TestClockAhead_ReuseNamesTheWindowsUse is live22's D1: a key used by a
// pod 10 minutes slow, beside one 2 minutes ahead whose refusal of the
// key (E_REQUEST_REUSE) is dated 12 minutes later. The slow pod holds the
// watermark back, so the key's use is still kept when the refusal, judged
// on arrival at its place, comes; judged in order it was forgotten, and
// the refusal is named alone (correlation_window 2m, as live22's). Two
// other keys are named with their use: one the ahead pod used 90 s
// before its refusal, and one a right pod used 10 s before the refusal,
// delivered after it. A fourth is named with the use that binds it in
// order, delivered after the pair made with a later one.
func TestClockAhead_ReuseNamesTheWindowsUse(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 15, 30, 0, 0, time.UTC)
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	var s podCalls
	s.background("thegram", t0, t0.Add(25*time.Minute), podRight, podAhead, podSlow)
	w := t0.Add(5 * time.Minute)
	// rk-old: used by the slow pod (dated 15:24:59), refused from the
	// ahead pod (dated 15:37:09).
	s.add(podSlow, w, gramPatch("rk-old", "a.gram", "x", gramPatched))
	s.add(podAhead, w.Add(10*time.Second), gramPatch("rk-old", "a.gram", "y", gramReused))
	// rk-ahead: both from the ahead pod, 90 s apart.
	s.add(podAhead, w.Add(20*time.Second), gramPatch("rk-ahead", "b.gram", "x", gramPatched))
	s.add(podAhead, w.Add(110*time.Second), gramPatch("rk-ahead", "b.gram", "y", gramReused))
	// rk-right: refused from the ahead pod (dated 15:38:59), used by the
	// right pod 10 s before that (15:38:49), delivered 2 minutes after.
	s.add(podAhead, w.Add(time.Minute), gramPatch("rk-right", "c.gram", "y", gramReused))
	s.add(podRight, w.Add(170*time.Second), gramPatch("rk-right", "c.gram", "x", gramPatched))
	// rk-swap: the ahead pod uses the key (dated 15:40:59) and its
	// refusal (15:41:19) names that use; the right pod's use, dated
	// before both (15:40:49) and delivered after them, binds the key in
	// order, and the refusal names it.
	w2 := w.Add(3 * time.Minute)
	s.add(podAhead, w2, gramPatch("rk-swap", "d.gram", "x", gramPatched))
	s.add(podAhead, w2.Add(20*time.Second), gramPatch("rk-swap", "d.gram", "y", gramReused))
	s.add(podRight, w2.Add(110*time.Second), gramPatch("rk-swap", "d.gram", "x", gramPatched))

	live, inOrder := judgeLiveAndInOrder(t, cfg, s.calls)
	got, want := live.open(audit.KindRequestIDReuse), inOrder.open(audit.KindRequestIDReuse)
	if !slices.Equal(got, want) {
		t.Fatalf("request_id_reuse live, a pod ahead and one slow:\n%s\nin time order:\n%s", lines(got), lines(want))
	}
	// The letter, not only analyze's word: the refusal alone where the
	// key's use lies outside the window, with its use within it.
	if n := namedCalls(got); len(n) != 4 || n["rk-old"] != 1 || n["rk-ahead"] != 2 || n["rk-right"] != 2 || n["rk-swap"] != 2 {
		t.Fatalf("calls named by key = %v, want rk-old 1 (its use 12 min before, window 2m), rk-ahead, rk-right and rk-swap 2:\n%s", n, lines(got))
	}
	if len(live.withdrawn) != 1 {
		t.Fatalf("%d findings withdrawn, want 1 (rk-swap's with the ahead pod's use): the test does not test a replacement", len(live.withdrawn))
	}
}

// TestClockAhead_DuplicateCreateRepaired is live22's D2: a create of the
// pod 2 minutes ahead (B, dated 10:05:00) and a later one of it (C,
// 10:06:55) are judged on arrival, C as B's duplicate; the right pod's
// create A, dated before both (10:04:57), arrives after them. Judged in
// order A is the first of the three, and both B and C are its duplicates:
// the pair B, C made first is withdrawn and A, C made.
func TestClockAhead_DuplicateCreateRepaired(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	var s podCalls
	s.background("oddlynew", t0, t0.Add(10*time.Minute), podRight, podAhead)
	s.add(podAhead, t0.Add(3*time.Minute+time.Second), createDoc("cid-b", "doc_b"))
	s.add(podAhead, t0.Add(4*time.Minute+56*time.Second), createDoc("cid-c", "doc_c"))
	s.add(podRight, t0.Add(4*time.Minute+58*time.Second), createDoc("cid-a", "doc_a"))

	live, inOrder := judgeLiveAndInOrder(t, cfg, s.calls)
	got, want := live.open(audit.KindDuplicateCreate), inOrder.open(audit.KindDuplicateCreate)
	if !slices.Equal(got, want) {
		t.Fatalf("duplicate_create live, a pod ahead:\n%s\nin time order:\n%s", lines(got), lines(want))
	}
	if n := namedCalls(got); len(got) != 2 || n["cid-b"] != 2 || n["cid-c"] != 2 {
		t.Fatalf("want A's duplicates B and C:\n%s", lines(got))
	}
	if len(live.withdrawn) != 1 {
		t.Fatalf("%d findings withdrawn, want 1 (B, C): the test does not test a replacement", len(live.withdrawn))
	}
}

// namedCalls returns, by key, how many calls the findings of open (idLog)
// name.
func namedCalls(open []string) map[string]int {
	n := map[string]int{}
	for _, l := range open {
		f := strings.Fields(l)
		i := strings.Index(l, "[")
		j := strings.Index(l, "]")
		n[f[2]] = len(strings.Fields(l[i+1 : j]))
	}
	return n
}

func lines(l []string) string { return "  " + strings.Join(l, "\n  ") }

// TestClockAhead_PairsRandom generalizes D2: creates of one document (and
// patches under a few request_ids), from a right pod and one 2 minutes
// ahead, the right pod's calls a third of the time late by up to
// allowed_lateness less 10 s. Over 30 orders the duplicate_create
// findings that stand, ids included, are those of the same calls judged
// in time order (on main's detector seed 0 already differs). So do the
// request_id_reuse findings of four keys, two intents and refusals from
// both pods since rid23 (before it 28 of the 30 orders named other calls
// than judging in order: the binder a window later, and one reuse
// reported per binding, were not judged again for a late use).
func TestClockAhead_PairsRandom(t *testing.T) {
	cfg := NewDefaultConfig()
	cfg.CorrelationWindow = 2 * time.Minute
	var withdrawn int
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 22))
		t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
		var s podCalls
		s.background("thegram", t0, t0.Add(12*time.Minute), podRight, podAhead)
		s.background("oddlynew", t0, t0.Add(12*time.Minute), podRight, podAhead)
		for i := range 60 {
			wall := t0.Add(time.Duration(10+rng.IntN(8*60)) * time.Second)
			p := podAhead
			if rng.IntN(2) == 0 {
				p = podRight
				if rng.IntN(3) == 0 {
					wall = wall.Add(time.Duration(rng.IntN(int((cfg.AllowedLateness-10*time.Second)/time.Second))) * time.Second)
				}
			}
			if rng.IntN(2) == 0 {
				s.add(p, wall, createDoc(fmt.Sprintf("cid-%d", i), fmt.Sprintf("doc_%d", i)))
				continue
			}
			result := gramPatched
			if rng.IntN(3) == 0 {
				result = gramReused
			}
			s.add(p, wall, gramPatch(fmt.Sprintf("rk-%d", rng.IntN(4)), "a.gram", fmt.Sprint("t", rng.IntN(2)), result))
		}
		live, inOrder := judgeLiveAndInOrder(t, cfg, s.calls)
		kinds := []audit.Kind{audit.KindDuplicateCreate, audit.KindRequestIDReuse}
		if got, want := live.open(kinds...), inOrder.open(kinds...); !slices.Equal(got, want) {
			t.Fatalf("seed %d: live, a pod ahead:\n%s\nin time order:\n%s", seed, lines(got), lines(want))
		}
		withdrawn += len(live.withdrawn)
	}
	if withdrawn == 0 {
		t.Fatal("no finding withdrawn: the test does not test a replacement")
	}
	t.Logf("%d findings withdrawn", withdrawn)
}
