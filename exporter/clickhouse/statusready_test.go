package clickhouse

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// TestOutage_Status: GET /api/v1/status says the store is not ready
// during a ClickHouse outage, with the reason Ready gives (what waits in
// the spool), and ready again once ClickHouse is back and the spool is
// drained. Before, the status had no store field: `mcpaudit status` said
// nothing during an outage (found from outside, op15).
func TestOutage_Status(t *testing.T) {
	o := testOptions(t)
	p, dsn := newProxy(t, o.DSN)
	o.DSN = dsn
	o.Ack = AckLog
	s := openStore(t, o)
	q := api.New(s, 0.999)
	q.Status = func() ([]detect.PartitionStatus, int64, int) { return nil, 0, 0 }
	srv := httptest.NewServer(q.Handler())
	defer srv.Close()
	status := func() api.StatusResponse {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/api/v1/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st api.StatusResponse
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		if st.Store == nil {
			t.Fatal("the status has no store field")
		}
		return st
	}
	if st := status(); !st.Store.Ready || st.Store.Reason != "" {
		t.Errorf("before the outage: store %+v, want ready", *st.Store)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		traffic(t, s, stop, 50)
	}()
	time.Sleep(500 * time.Millisecond)
	p.setDown(true)
	var st api.StatusResponse
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if st = status(); !st.Store.Ready && strings.Contains(st.Store.Reason, "wait in the spool") {
			break
		}
	}
	if st.Store.Ready || !strings.Contains(st.Store.Reason, "clickhouse unavailable") || !strings.Contains(st.Store.Reason, "wait in the spool") {
		t.Errorf("during the outage: store %+v, want not ready, clickhouse unavailable and what waits in the spool", *st.Store)
	}
	p.setDown(false)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	waitReady(t, s, 2*time.Minute)
	if st := status(); !st.Store.Ready {
		t.Errorf("after the outage: store %+v, want ready", *st.Store)
	}
}
