package detect_test

import (
	"fmt"
	"testing"
	"time"
)

// TestDetector_LateAnswerChains (rev22, review of ur22): four writes of
// one document by one client, each on the revision the one before made
// (in time order, answered, no finding), all first timed out (each the
// blind re-send of the one before: chains p -> s -> s2 -> s3 of
// unsafe_retry), then their answers late in every order (24), the
// windows open or closed; also with an edit sent twice (a double
// application) at two places in the chain. The example captures have at
// most three answered calls, so ur22's orders never reached four answers
// nor a re-send itself re-sent by an uncertain write. The findings
// standing and write states must be those of the answered calls in time
// order, and every sink told a finding and its withdrawal once each
// (lateAnswersOf). Passes on ur22's code: no defect found here.
func TestDetector_LateAnswerChains(t *testing.T) {
	at := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	tail := [][]byte{fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-tail","request":{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"gram_projects","arguments":{}}},"duration_ms":10,"response":{"jsonrpc":"2.0","id":9,"result":{"isError":false,"structuredContent":{"projects":[]}}}}`,
		at.Add(11*time.Minute).Format(time.RFC3339Nano))}
	for _, texts := range [][]string{{"a", "b", "c", "d"}, {"a", "b", "a", "c"}, {"a", "a", "b", "b"}} {
		var scen [][]byte
		for i, tx := range texts {
			scen = append(scen, gramPatch(at.Add(time.Duration(i+1)*5*sec), i+1, fmt.Sprint("req-", i), tx, true))
		}
		for _, order := range permutations([]int{0, 1, 2, 3}) {
			for _, closed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/closed=%v", texts, order, closed), func(t *testing.T) {
					lateAnswersOf(t, scen, tail, order, closed)
				})
			}
		}
	}
}
