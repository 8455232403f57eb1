package detect

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// rev20mCall is one generated copy call: its line, its time and when it
// is delivered (its time plus a delay).
type rev20mCall struct {
	line    []byte
	at, arr time.Time
}

// rev20mCalls generates n copy applies and receipts of keys op_0..op_{keys-1}
// with the spacing, retryAfters and delivery delays of the seed's shape:
// equal times (steps of 0 or 1 s), a hot key polled every second, and
// delays up to maxDelay (some past allowed_lateness when maxDelay is).
func rev20mCalls(rng *rand.Rand, n, keys int, maxStep, maxDelay time.Duration) []rev20mCall {
	t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	calls := make([]rev20mCall, n)
	at := t0
	for i := range n {
		if maxStep > 0 {
			// Whole seconds: many calls share a time.
			at = at.Add(time.Duration(rng.Int64N(int64(maxStep/time.Second)+1)) * time.Second)
		}
		op := fmt.Sprintf("op_%d", rng.IntN(keys))
		until := at.Add(time.Duration(rng.IntN(150)) * time.Second)
		var line []byte
		switch rng.IntN(5) {
		case 0:
			line = copyReceipt(op, i+1, at, until, "applying")
		case 1:
			line = copyReceipt(op, i+1, at, time.Time{}, "applied")
		default:
			line = polledApply(op, i+1, at)
			line = []byte(strings.Replace(string(line), at.Add(time.Minute).UTC().Format("2006-01-02T15:04:05.000Z"), until.UTC().Format("2006-01-02T15:04:05.000Z"), 2))
		}
		d := time.Duration(0)
		if rng.IntN(3) == 0 {
			d = time.Duration(rng.Int64N(int64(maxDelay/time.Second)+1)) * time.Second
		}
		calls[i] = rev20mCall{line, at, at.Add(d)}
	}
	return calls
}

// rev20mFindings judges the lines in the given order (wall: each call
// delivered at its arrival, with Tick every step, else as analyze does)
// and returns the findings as a sorted list of kind, key and calls.
func rev20mFindings(t *testing.T, rd *dialect.Reader, calls []rev20mCall, keep, wall bool) (out []string, tooLate int64) {
	cfg := NewDefaultConfig()
	cfg.keepLeases = keep
	s := &findingList{}
	e := NewEngine(cfg, s)
	for _, c := range calls {
		var w time.Time
		if wall {
			w = c.arr
		}
		e.Add("otlp:a", leanRecord(t, rd, c.line), w)
		if wall {
			e.Tick(w)
		}
	}
	e.Flush()
	for _, f := range s.findings {
		out = append(out, fmt.Sprintf("%s %s %v", f.Kind, f.Key, f.Calls))
	}
	slices.Sort(out)
	return out, e.Stats().TooLate
}

// TestRev20m_FoldRandomShapes (rev20m, reviewing mem20): foldLeases
// changes no finding, over shapes TestLeases_FoldChangesNoFinding does not
// try: calls sharing a second, one hot key, retryAfters up to 150 s
// (longer than allowed_lateness, so a folded receipt's lease is still in
// effect), delays up to and past allowed_lateness, and delivery both as
// analyze does and live (wall clock, Tick: the watermark jumps with
// idle periods). Against the engine that keeps every use (fx19d), and,
// where no call is too late, against the calls judged in time order.
func TestRev20m_FoldRandomShapes(t *testing.T) {
	rd := dialect.NewReader(dialect.Config{})
	al := NewDefaultConfig().AllowedLateness
	type shape struct {
		name     string
		n, keys  int
		step     time.Duration
		maxDelay time.Duration
	}
	shapes := []shape{
		{"equal_times", 400, 2, time.Second, al},
		{"hot_key", 600, 1, 2 * time.Second, al},
		{"spread", 300, 3, 8 * time.Second, al},
		{"past_allowed", 400, 2, 3 * time.Second, al + 20*time.Second},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			diffSorted := 0
			for seed := range uint64(10) {
				rng := rand.New(rand.NewPCG(seed, 2020))
				calls := rev20mCalls(rng, sh.n, sh.keys, sh.step, sh.maxDelay)
				delivered := slices.Clone(calls)
				slices.SortStableFunc(delivered, func(a, b rev20mCall) int { return a.arr.Compare(b.arr) })
				inOrder := slices.Clone(calls)
				slices.SortStableFunc(inOrder, func(a, b rev20mCall) int { return a.at.Compare(b.at) })
				for _, wall := range []bool{false, true} {
					folded, tl := rev20mFindings(t, rd, delivered, false, wall)
					kept, _ := rev20mFindings(t, rd, delivered, true, wall)
					if !slices.Equal(folded, kept) {
						t.Fatalf("seed %d wall %v: folding changes the findings:\nfolded: %q\nkept:   %q", seed, wall, folded, kept)
					}
					if tl == 0 {
						want, _ := rev20mFindings(t, rd, inOrder, true, false)
						if !slices.Equal(kept, want) {
							diffSorted++
						}
					}
				}
			}
			if diffSorted > 0 {
				t.Logf("%d runs differ from the calls judged in time order with and without folding alike (fx19d's documented limits)", diffSorted)
			}
		})
	}
}

// TestRev20m_LeasesBoundedWithClockAhead (rev20m, reviewing mem20;
// clk21): a pod whose clock runs an hour ahead (past max_clock_skew)
// polls one copy every 2 s; its calls are judged at once, at their place
// in event time, an hour past the watermark, and a pod with a right clock
// polls the same copy, each call late behind them. foldLeases cuts at the
// watermark less allowed_lateness, so none of the ahead pod's uses is
// folded while the wall clock has not caught up, and each call of the
// right pod judged them all again: 1,861 uses kept and judged again per
// call after 3,600 calls, 7.1-8.2 ms a call (rev20m's D1).
//
// What each late call judges again is bounded (leaseSpan): the uses of the
// last allowed_lateness behind the watermark and the few around it. The
// ahead pod's uses are still kept until the watermark is allowed_lateness
// past them: once the wall clock catches up, the right pod's calls come
// among them, and only they tell what those find (folding them changed
// findings: clk21's report). It failed before clk21 (1,861 judged again
// per late call at the end).
func TestRev20m_LeasesBoundedWithClockAhead(t *testing.T) {
	cfg := NewDefaultConfig()
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	const n, step = 1800, 2 * time.Second
	e := NewEngine(cfg, &findingList{})
	e.ClockPerPartition()
	bound := uint64(2*int(cfg.AllowedLateness/step) + 8)
	for i := range n {
		wall := t0.Add(time.Duration(i) * step)
		e.Add("otlp:ahead", leanRecord(t, rd, polledApply("op_polled", 2*i+1, wall.Add(time.Hour))), wall)
		d := e.parts[PartitionKey{Server: "oddlynew"}].det
		before := d.leasesJudged
		e.Add("otlp:right", leanRecord(t, rd, polledApply("op_polled", 2*i+2, wall)), wall)
		if got := d.leasesJudged - before; got > bound {
			t.Fatalf("call %d of the right pod, late behind %d of the pod an hour ahead, judges again %d uses; want at most %d (allowed_lateness %v at two per %v)", i+1, i+1, got, bound, cfg.AllowedLateness, step)
		}
		e.Tick(wall)
	}
	ks := polledKey(t, e, "op_polled")
	if got, want := len(ks.more.leases), n+int(bound); got > want {
		t.Errorf("the key keeps %d applies and receipts after %d calls; want at most the ahead pod's %d and %d", got, 2*n, n, bound)
	}
}
