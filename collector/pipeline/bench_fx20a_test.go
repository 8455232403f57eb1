package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// BenchmarkFx20a_AnsweredCopies measures what fx20a adds on the common
// path it touches: a second observation with a response of a call already
// judged (an exact copy, both answered, sent 0-10 s later), which the
// engine now looks up in the ledger (detect's answerLate) before dropping
// it. 1,000 accepted writes to 1,000 documents, each sent again after all.
func BenchmarkFx20a_AnsweredCopies(b *testing.B) {
	t0 := wallStart.Add(-time.Hour)
	var lines [][]byte
	for i := range 1000 {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		lines = append(lines, fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s-%d","request":{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"b/%d.gram","base_revision":3,"expected_hash":"h3","request_id":"r-%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"response":{"jsonrpc":"2.0","id":%d,"result":{"isError":false,"structuredContent":{"path":"b/%d.gram","rev":4,"hash":"h4","sync":{"state":"synced"}}}}}`,
			at.Format(time.RFC3339Nano), i%50, i, i, i, i, i))
	}
	lines = append(lines, lines...)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		recs := decode(b, lines)
		e := detect.NewEngine(detect.NewDefaultConfig())
		b.StartTimer()
		for _, r := range recs {
			e.Add("file", r, time.Time{})
		}
		e.Flush()
	}
}
