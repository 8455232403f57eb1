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

// TestLeases_ReplacedClockAhead (cl21b, the merge of lo21 and clk21):
// lo21 withdraws a premature_retry that a late copy use changes and makes
// the one judging in order makes; clk21 judges again only the uses
// around the late one (leaseSpan). Both at once: the shape of
// TestLeases_FoldChangesNoFindingClockAhead (two pods of one server, one
// whose clock runs ahead, the other's calls late behind it), every call
// within allowed_lateness of its arrival so that all are judged, gives
//   - the same findings made and withdrawn, in the same order, as the
//     engine that keeps every use and judges them all again (keepLeases);
//   - the findings that stand (made, less those withdrawn) that the same
//     calls judged in time order make (analyze);
//
// over 40 orders, a pod an hour and 10 minutes ahead. A merge that judged
// the span for the findings wanted but withdrew over the whole list
// withdrew the findings of the uses outside the span; clk21 alone kept
// the pair reported before.
func TestLeases_ReplacedClockAhead(t *testing.T) {
	rd := dialect.NewReader(dialect.Config{})
	al := NewDefaultConfig().AllowedLateness
	for _, ahead := range []time.Duration{time.Hour, 10 * time.Minute} {
		t.Run(fmt.Sprint(ahead), func(t *testing.T) {
			var withdrawn int
			var judged [2]uint64
			for seed := range uint64(40) {
				calls := clockAheadCalls(rand.New(rand.NewPCG(seed, 21)), 300, ahead, al)
				// Judged, all of them: the right pod's calls late by less
				// than allowed_lateness.
				dated := make(map[string]time.Time, len(calls))
				for _, c := range calls {
					dated[string(c.line)] = eventTime(t, rd, c.line)
				}
				for i := range calls {
					if calls[i].src == "otlp:right" {
						if d := calls[i].arr.Sub(dated[string(calls[i].line)]); d > al-10*time.Second {
							calls[i].arr = calls[i].arr.Add(al - 10*time.Second - d)
						}
					}
				}
				slices.SortStableFunc(calls, func(a, b aheadCall) int { return a.arr.Compare(b.arr) })
				var log [2][]string
				var open [2][]string
				for k, keep := range []bool{false, true} {
					cfg := NewDefaultConfig()
					cfg.keepLeases = keep
					s := &findingLog{}
					e := NewEngine(cfg, s)
					e.ClockPerPartition()
					for _, c := range calls {
						e.Add(c.src, leanRecord(t, rd, c.line), c.arr)
						e.Tick(c.arr)
					}
					judged[k] += e.parts[PartitionKey{Server: "oddlynew"}].det.leasesJudged
					e.Flush()
					log[k], open[k] = s.log, s.open()
					withdrawn += s.withdrawn
				}
				if !slices.Equal(log[0], log[1]) {
					t.Fatalf("seed %d: judging again only around a late use changes what is made and withdrawn:\nspan: %q\nall:  %q", seed, log[0], log[1])
				}
				// analyze: the same calls in time order.
				inOrder := slices.Clone(calls)
				slices.SortStableFunc(inOrder, func(a, b aheadCall) int {
					return dated[string(a.line)].Compare(dated[string(b.line)])
				})
				s := &findingLog{}
				e := NewEngine(NewDefaultConfig(), s)
				for _, c := range inOrder {
					e.Add("analyze", leanRecord(t, rd, c.line), time.Time{})
				}
				e.Flush()
				if want := s.open(); !slices.Equal(open[0], want) {
					t.Fatalf("seed %d: the findings that stand are not analyze's:\nlive:    %q\nanalyze: %q", seed, open[0], want)
				}
			}
			if withdrawn == 0 {
				t.Fatal("no finding withdrawn: the test does not test a replacement")
			}
			if judged[0] >= judged[1] {
				t.Fatalf("%d uses judged again, against %d judging them all: the test does not test leaseSpan", judged[0], judged[1])
			}
			t.Logf("%d findings withdrawn; %d uses judged again, against %d judging them all", withdrawn/2, judged[0], judged[1])
		})
	}
}

// eventTime returns the time a call's line is dated.
func eventTime(t *testing.T, rd *dialect.Reader, line []byte) time.Time {
	t.Helper()
	return leanRecord(t, rd, line).Call.Time
}

// findingLog keeps the findings made and withdrawn, in order
// (audit.FindingWithdrawer).
type findingLog struct {
	log       []string
	withdrawn int
}

var _ audit.FindingWithdrawer = (*findingLog)(nil)

func (*findingLog) Call(*audit.Record)                   {}
func (*findingLog) Write(*audit.Write, audit.WriteState) {}
func (s *findingLog) Finding(f *audit.Finding)           { s.log = append(s.log, "made "+findingLine(f)) }

func (s *findingLog) WithdrawFinding(f *audit.Finding, call string, _ time.Time) {
	s.withdrawn++
	s.log = append(s.log, "withdrawn "+findingLine(f)+" by "+call)
}

// open returns the findings made and not withdrawn, sorted.
func (s *findingLog) open() []string {
	var open []string
	for _, l := range s.log {
		if f, ok := strings.CutPrefix(l, "made "); ok {
			open = append(open, f)
			continue
		}
		f, _ := strings.CutPrefix(l, "withdrawn ")
		for i := len(open) - 1; i >= 0; i-- {
			if l := open[i]; len(f) > len(l) && f[:len(l)] == l && f[len(l):len(l)+4] == " by " {
				open = slices.Delete(open, i, i+1)
				break
			}
		}
	}
	slices.Sort(open)
	return open
}

func findingLine(f *audit.Finding) string {
	return fmt.Sprintf("%s %s %v %s", f.Kind, f.Key, f.Calls, f.Time.Format(time.RFC3339Nano))
}
