package detect

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// TestQuietSourceNotLate: a lone poster delivers each call some time after
// its start (mcpaudit proxy: after the response, in the segment sealed
// within the second), the delay varying by less than detect.lateness, with
// pauses longer than the idle timeout between calls. Its calls are in time
// order, as on time as when it is busy: none counts as late. (Once quiet,
// the watermark went on with the wall clock from the source's last delay,
// with no lateness bound: a call whose delay was a few milliseconds longer
// than the previous one's was late, about one in two on a quiet server.)
func TestQuietSourceNotLate(t *testing.T) {
	cfg := NewDefaultConfig()
	e := NewEngine(cfg, countFindings(func() {}))
	rd := dialect.NewReader(dialect.Config{})
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	wall := t0
	for i := range 20 {
		start := t0.Add(time.Duration(i) * 30 * time.Second)
		// The proxy's delay: the call's few milliseconds, then up to a
		// second for its segment to be sealed and posted.
		delay := 50*time.Millisecond + time.Duration((i*37)%90)*10*time.Millisecond
		for ; wall.Before(start.Add(delay)); wall = wall.Add(250 * time.Millisecond) {
			e.Tick(wall)
		}
		line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/a.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/a.gram","rev":4,"hash":"bb"}}}}`,
			start.Format(time.RFC3339Nano), i, i)
		e.Add("calls:proxy/thegram/host", leanRecord(t, rd, line), wall)
	}
	if st := e.Stats(); st.Late != 0 || st.TooLate != 0 {
		t.Errorf("%d of %d calls late and %d too late, want none: the source's delay varied by less than detect.lateness (%s)", st.Late, st.Calls, st.TooLate, cfg.Lateness)
	}
}
