package sqlite

import (
	"context"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
)

// BenchmarkResendStored measures the path of a batch of 512 calls that
// are all stored already (a sender retrying after a lost acknowledgement,
// a backlog replayed): plain is AppendCalls, which skips them; compared is
// AppendCallsCompared, which also reads each stored call back, decodes it
// and compares the responses (the same here, so none differs: every one
// is read). new512 sends 512 new calls each time, the common path, through
// either. It reports the CPU and the wall time per call (the process's CPU:
// the committer's too).
//
//	go test -run '^$' -bench 'ResendStored' -benchtime 200x ./exporter/sqlite/
func BenchmarkResendStored(b *testing.B) {
	const batch, stored = 512, 16
	for _, ack := range []string{AckCommit, AckLog} {
		for _, bc := range []struct {
			name         string
			compare, new bool
		}{{"plain", false, false}, {"compared", true, false}, {"new512/plain", false, true}, {"new512/compared", true, true}} {
			compare := bc.compare
			b.Run(ack+"/"+bc.name, func(b *testing.B) {
				s := openTemp(b, Options{Ack: ack})
				defer s.Close()
				recs := pool(b, 20000)
				batches := make([][]audit.Record, stored)
				for j := range batches {
					batches[j] = make([]audit.Record, batch)
					for i := range batches[j] {
						n := uint64(j*batch + i)
						batches[j][i] = fresh(recs[n%uint64(len(recs))], n)
					}
					if _, err := s.AppendCalls(context.Background(), batches[j]); err != nil {
						b.Fatal(err)
					}
				}
				wantN := 0
				if bc.new {
					wantN = batch
				}
				send := func(calls []audit.Record) {
					if compare {
						n, _, differ, err := s.AppendCallsCompared(context.Background(), calls)
						if err != nil || n != wantN || len(differ) != 0 {
							b.Fatalf("AppendCallsCompared = %d, %v, %v; want %d stored, none differing", n, differ, err, wantN)
						}
						return
					}
					if n, err := s.AppendCalls(context.Background(), calls); err != nil || n != wantN {
						b.Fatalf("AppendCalls = %d, %v; want %d stored", n, err, wantN)
					}
				}
				var next []audit.Record
				if bc.new {
					next = make([]audit.Record, b.N*batch)
					for i := range next {
						n := uint64(stored*batch + i)
						next[i] = fresh(recs[n%uint64(len(recs))], n)
					}
				}
				cpu0 := procstat.CPU()
				b.ResetTimer()
				for j := range b.N {
					if bc.new {
						send(next[j*batch : (j+1)*batch])
						continue
					}
					send(batches[j%stored])
				}
				b.StopTimer()
				calls := float64(b.N * batch)
				b.ReportMetric(float64(procstat.CPU()-cpu0)/1e3/calls, "cpu-µs/call")
				b.ReportMetric(b.Elapsed().Seconds()*1e6/calls, "µs/call")
			})
		}
	}
}
