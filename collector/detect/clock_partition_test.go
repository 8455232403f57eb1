package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestClockPerPartition: one poster sends two servers, oddlynew's calls 3
// minutes behind thegram's (its own queue is behind). With the clock kept
// per partition, as the live service keeps it, thegram's calls do not make
// oddlynew's late: none is late or too late. The control, one clock per
// source as analyze keeps it, shows what that prevents: oddlynew's calls
// come more than the allowed lateness behind its watermark and are not
// judged.
func TestClockPerPartition(t *testing.T) {
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	rd := dialect.NewReader(dialect.Config{})
	read := func(server string, at time.Time, id int) *audit.Record {
		line := fmt.Appendf(nil, `{"time":%q,"server":%q,"session":"s1","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"read","arguments":{"path":"a"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
			at.Format(time.RFC3339Nano), server, id, id)
		return leanRecord(t, rd, line)
	}
	for _, perPartition := range []bool{true, false} {
		t.Run(fmt.Sprintf("per_partition=%v", perPartition), func(t *testing.T) {
			cfg := NewDefaultConfig()
			cfg.AllowedLateness = time.Minute
			e := NewEngine(cfg)
			if perPartition {
				e.ClockPerPartition()
			}
			wall := start
			for i := range 120 {
				e.Add("shipper", read("thegram", wall.Add(-time.Second), 2*i+1), wall)
				e.Add("shipper", read("oddlynew", wall.Add(-3*time.Minute), 2*i+2), wall)
				wall = wall.Add(time.Second)
			}
			e.Tick(wall)
			var odd PartitionStatus
			for _, p := range e.Status(wall) {
				if p.Server == "oddlynew" {
					odd = p
				}
			}
			if odd.Calls != 120 {
				t.Fatalf("oddlynew: %d calls, want 120", odd.Calls)
			}
			if late := odd.Late + odd.TooLate; perPartition && late != 0 {
				t.Errorf("oddlynew: %d calls late and %d too late behind thegram's time", odd.Late, odd.TooLate)
			} else if !perPartition && odd.TooLate == 0 {
				t.Errorf("control: with one clock per source no call of oddlynew was too late; the test shows nothing")
			}
			if perPartition && (len(odd.Sources) != 1 || odd.Sources[0].Name != "shipper" || odd.Sources[0].Calls != 120) {
				t.Errorf("oddlynew's sources %+v, want shipper with its 120 calls", odd.Sources)
			}
		})
	}
}
