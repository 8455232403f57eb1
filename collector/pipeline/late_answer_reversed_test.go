package pipeline_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// TestLateAnswer_Reversed (ur22; vf21's open D1, found from outside in 48
// of 250 live copies): oddlynew-normal-edit's second and third runs, a
// write and a blind re-write of one document, both timed out at the
// client (an unverified_write each and an unsafe_retry naming both),
// their answers from the server's exporter in reverse order, 8 s apart,
// the windows open or closed, both acks. Judged in time order the
// answered calls make no finding: the store must hold none open, and
// the sinks must have been told each withdrawn (before ur22 the
// unsafe_retry stayed open; in order it went).
func TestLateAnswer_Reversed(t *testing.T) {
	scen, tail := exampleLines(t, "../../testdata/examples/oddlynew-normal-edit.ndjson")
	first := slices.Clone(scen)
	for _, i := range []int{1, 2} {
		first[i] = unansweredCopy(t, scen[i])
	}
	before := analyzed(t, first, detect.NewDefaultConfig())
	if !strings.Contains(fmt.Sprint(values(before.findings)), "unsafe_retry") {
		t.Fatalf("unanswered, the calls make %v: no unsafe_retry, the test shows nothing", values(before.findings))
	}
	for _, ack := range []string{sqlite.AckCommit, sqlite.AckLog} {
		for _, closed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/closed=%v", ack, closed), func(t *testing.T) {
				lateAnswersOf(t, scen, tail, []int{2, 1}, leCase{closed: closed, ack: ack})
			})
		}
	}
}
