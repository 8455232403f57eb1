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

// polledApply is a call applying copy op at at, answered applying with a
// retryAfter a minute on: a client polling a long copy by re-applying.
func polledApply(op string, id int, at time.Time) []byte {
	until := at.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z")
	res := fmt.Sprintf(`{"operationId":"%s","state":"applying","failure":null,"nextAction":"wait_then_retry_apply","retryAfter":"%s"}`, op, until)
	esc := strings.ReplaceAll(res, `"`, `\"`)
	return fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":"s-mem20","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"async () => await organizations.applyDocumentCopy({ operationId: \"%s\" })"}}},"duration_ms":300,"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":%s,"logs":[],"calls":[{"tool":"organizations.applyDocumentCopy","outcome":"succeeded","count":1}]},"content":[{"type":"text","text":"%s"}]}}}`,
		at.UTC().Format("2006-01-02T15:04:05.000Z"), id, op, id, res, esc)
}

// polledKey returns what partition oddlynew's detector keeps of the
// operationId op.
func polledKey(t *testing.T, e *Engine, op string) *keyState {
	t.Helper()
	p := e.parts[PartitionKey{Server: "oddlynew"}]
	if p == nil {
		t.Fatal("no partition for oddlynew")
	}
	ks := p.det.keys.get(keyHash(keyID{"operationId", op}))
	if ks == nil || ks.more == nil {
		t.Fatalf("no lease state kept for %s", op)
	}
	return ks
}

// TestLeases_BoundedByAllowedLateness (mem20, rev19d's D3 against fx19d):
// the applies and receipts a copy key keeps for judging a late one again
// (keyMore.leases) are those of the last allowed_lateness, not every one
// of the key's life. One key applied every 2 s for 4,000 calls, every
// other pair delivered swapped (the earlier one late), kept all 4,000
// and went over them at each late call; what can still change a
// judgement is the 60 uses of the last 2 minutes (a call later than that
// is too late and not judged), plus the lease in effect before them.
func TestLeases_BoundedByAllowedLateness(t *testing.T) {
	cfg := NewDefaultConfig()
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	const n, step = 4000, 2 * time.Second
	lines := make([][]byte, n)
	for i := range n {
		lines[i] = polledApply("op_polled", i+1, t0.Add(time.Duration(i)*step))
	}
	for i := 0; i+1 < n; i += 4 {
		lines[i], lines[i+1] = lines[i+1], lines[i]
	}
	s := &findingList{}
	e := NewEngine(cfg, s)
	for _, l := range lines {
		e.Add("analyze", leanRecord(t, rd, l), time.Time{})
	}
	ks := polledKey(t, e, "op_polled")
	bound := int(cfg.AllowedLateness/step) + 4
	if got := len(ks.more.leases); got > bound {
		t.Errorf("the key keeps %d applies and receipts after %d; want at most %d (allowed_lateness %v at one per %v)", got, n, bound, cfg.AllowedLateness, step)
	}
	if got := len(ks.more.leasesReported) + len(ks.more.appliesReported); got > 2*bound+8 {
		t.Errorf("the key keeps %d reported receipts and applies; want at most %d", got, 2*bound+8)
	}
	e.Flush()
	if len(s.findings) < n/2 {
		t.Errorf("%d findings; want a premature_retry for most of the %d re-applies", len(s.findings), n)
	}
}

// TestLeases_FoldChangesNoFinding (mem20): folding the uses older than
// allowed_lateness into the lease in effect after them (foldLeases)
// changes no finding. Copy applies and receipts of a few keys, at
// random times and retryAfters, delivered in random orders (some calls
// late within allowed_lateness, some too late), are judged by an engine
// that folds and by one that keeps every use as fx19d did; the findings,
// in the order they are made, are the same.
func TestLeases_FoldChangesNoFinding(t *testing.T) {
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	var folds int
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 20))
		const n = 300
		type call struct {
			line []byte
			at   time.Time
		}
		calls := make([]call, n)
		at := t0
		for i := range n {
			at = at.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
			op := fmt.Sprintf("op_%d", rng.IntN(3))
			until := at.Add(time.Duration(rng.IntN(90)) * time.Second)
			var line []byte
			switch rng.IntN(4) {
			case 0: // a receipt
				line = copyReceipt(op, i+1, at, until, "applying")
			case 1: // a receipt of a copy done: it ends the lease
				line = copyReceipt(op, i+1, at, time.Time{}, "applied")
			default:
				line = polledApply(op, i+1, at)
				line = []byte(strings.Replace(string(line), at.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z"), until.UTC().Format("2006-01-02T15:04:05.000Z"), 2))
			}
			calls[i] = call{line, at}
		}
		// Delivered late: each call moved up to 40 places on (up to about
		// 3 minutes, past allowed_lateness for some).
		for i := range n {
			j := min(n-1, i+rng.IntN(40))
			if rng.IntN(3) == 0 {
				calls[i], calls[j] = calls[j], calls[i]
			}
		}
		var got [2][]string
		for k, keep := range []bool{false, true} {
			cfg := NewDefaultConfig()
			cfg.keepLeases = keep
			s := &findingList{}
			e := NewEngine(cfg, s)
			for _, c := range calls {
				e.Add("analyze", leanRecord(t, rd, c.line), time.Time{})
			}
			if !keep {
				for _, ks := range e.parts[PartitionKey{Server: "oddlynew"}].det.keys.m {
					if ks.v.more != nil && ks.v.more.base != nil {
						folds++
					}
				}
			}
			e.Flush()
			for _, f := range s.findings {
				got[k] = append(got[k], fmt.Sprintf("%s %s %v %s", f.Kind, f.Key, f.Calls, f.Time.Format(time.RFC3339Nano)))
			}
		}
		if !slices.Equal(got[0], got[1]) {
			t.Fatalf("seed %d: folding changes the findings:\nfolded: %q\nkept:   %q", seed, got[0], got[1])
		}
	}
	if folds == 0 {
		t.Fatal("no key folded any use: the test does not test foldLeases")
	}
}

// copyReceipt is a getDocumentCopyReceipt call of copy op at at, answered
// in state, with retryAfter until (none when zero).
func copyReceipt(op string, id int, at, until time.Time, state string) []byte {
	ra := "null"
	if !until.IsZero() {
		ra = fmt.Sprintf("%q", until.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	res := fmt.Sprintf(`{"operationId":"%s","state":"%s","failure":null,"retryAfter":%s}`, op, state, ra)
	esc := strings.ReplaceAll(res, `"`, `\"`)
	return fmt.Appendf(nil, `{"time":%q,"server":"oddlynew","session":"s-mem20","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"run","arguments":{"code":"async () => await organizations.getDocumentCopyReceipt({ operationId: \"%s\" })"}}},"duration_ms":300,"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"result":%s,"logs":[],"calls":[{"tool":"organizations.getDocumentCopyReceipt","outcome":"succeeded","count":1}]},"content":[{"type":"text","text":"%s"}]}}}`,
		at.UTC().Format("2006-01-02T15:04:05.000Z"), id, op, id, res, esc)
}

// findingList keeps the findings made, in order.
type findingList struct{ findings []audit.Finding }

func (*findingList) Call(*audit.Record)                   {}
func (*findingList) Write(*audit.Write, audit.WriteState) {}
func (s *findingList) Finding(f *audit.Finding)           { s.findings = append(s.findings, *f) }

// TestLeases_FoldChangesNoFindingClockAhead (clk21, rev20m's D1): the
// shape of TestLeases_FoldChangesNoFinding delivered live by two pods of
// one server, one whose clock runs ahead past max_clock_skew (its calls
// judged at once, ahead of the watermark) and one with a right clock
// (behind them: late, some too late); each pod also delivers its own
// calls up to allowed_lateness out of order. An hour ahead, the wall
// clock does not catch up with the ahead pod in the 20 minutes of calls;
// 10 minutes ahead, it does, and the right pod's calls come among the
// ahead pod's. Judging again only the uses around a late one
// (leaseSpan) and folding change no finding, in the order they are made,
// against the engine that keeps every use and judges them all again,
// over 60 orders; and the spans are shorter than the list.
func TestLeases_FoldChangesNoFindingClockAhead(t *testing.T) {
	rd := dialect.NewReader(dialect.Config{})
	al := NewDefaultConfig().AllowedLateness
	for _, ahead := range []time.Duration{time.Hour, 10 * time.Minute} {
		t.Run(fmt.Sprint(ahead), func(t *testing.T) {
			var judged [2]uint64
			for seed := range uint64(60) {
				calls := clockAheadCalls(rand.New(rand.NewPCG(seed, 21)), 300, ahead, al)
				var got [2][]string
				for k, keep := range []bool{false, true} {
					cfg := NewDefaultConfig()
					cfg.keepLeases = keep
					s := &findingList{}
					e := NewEngine(cfg, s)
					e.ClockPerPartition()
					for _, c := range calls {
						e.Add(c.src, leanRecord(t, rd, c.line), c.arr)
						e.Tick(c.arr)
					}
					judged[k] += e.parts[PartitionKey{Server: "oddlynew"}].det.leasesJudged
					e.Flush()
					for _, f := range s.findings {
						got[k] = append(got[k], fmt.Sprintf("%s %s %v %s", f.Kind, f.Key, f.Calls, f.Time.Format(time.RFC3339Nano)))
					}
				}
				if !slices.Equal(got[0], got[1]) {
					t.Fatalf("seed %d: judging again only around a late use changes the findings:\nspan: %q\nall:  %q", seed, got[0], got[1])
				}
			}
			if judged[0] >= judged[1] {
				t.Fatalf("%d uses judged again, against %d judging them all: the test does not test leaseSpan", judged[0], judged[1])
			}
			t.Logf("%d uses judged again, against %d judging them all", judged[0], judged[1])
		})
	}
}

// aheadCall is one call of clockAheadCalls: its line, the pod (source)
// that delivers it and when it arrives (wall time).
type aheadCall struct {
	line []byte
	src  string
	arr  time.Time
}

// clockAheadCalls generates n copy applies and receipts of three keys,
// half from a pod whose clock runs ahead (dated ahead past the wall
// clock) and half from one with a right clock, in order of arrival. A
// third of each pod's calls arrive late: the right pod's by up to
// allowed_lateness and 40 s (some too late), the ahead pod's by up to
// allowed_lateness less 10 s behind its own.
func clockAheadCalls(rng *rand.Rand, n int, ahead, al time.Duration) []aheadCall {
	t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	calls := make([]aheadCall, n)
	at := t0
	for i := range n {
		at = at.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
		src, off, late := "otlp:right", time.Duration(0), al+40*time.Second
		if rng.IntN(2) == 0 {
			src, off, late = "otlp:ahead", ahead, al-10*time.Second
		}
		ev := at.Add(off)
		op := fmt.Sprintf("op_%d", rng.IntN(3))
		until := ev.Add(time.Duration(rng.IntN(90)) * time.Second)
		var line []byte
		switch rng.IntN(4) {
		case 0:
			line = copyReceipt(op, i+1, ev, until, "applying")
		case 1:
			line = copyReceipt(op, i+1, ev, time.Time{}, "applied")
		default:
			line = polledApply(op, i+1, ev)
			line = []byte(strings.Replace(string(line), ev.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z"), until.UTC().Format("2006-01-02T15:04:05.000Z"), 2))
		}
		arr := at
		if rng.IntN(3) == 0 {
			arr = arr.Add(time.Duration(rng.Int64N(int64(late/time.Second)+1)) * time.Second)
		}
		calls[i] = aheadCall{line, src, arr}
	}
	slices.SortStableFunc(calls, func(a, b aheadCall) int { return a.arr.Compare(b.arr) })
	return calls
}
