package receiver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/collector/receiver"
)

// keepIngester keeps every record it is handed, as a store that holds
// them in memory (or the engine) would.
type keepIngester struct {
	mu   sync.Mutex
	recs []*audit.Record
}

func (k *keepIngester) Ingest(_ context.Context, batches ...audit.Batch) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, b := range batches {
		k.recs = append(k.recs, b.Records...)
	}
	return 0, nil
}

// TestCalls_BodyBufferReused sends many requests of call records from
// several clients at once, so that body buffers are reused, and checks that
// every record kept from an earlier request still holds what was sent: no
// call refers to the body it came in, which the next request overwrites.
func TestCalls_BodyBufferReused(t *testing.T) {
	in := &keepIngester{}
	rc := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, in, nil, slog.New(slog.DiscardHandler))
	h := rc.Handler()
	reqs := benchCalls(40, 50)
	want := map[string]string{} // the call's request id: its arguments
	var bodies [][]byte
	for _, calls := range reqs {
		var body []byte
		for i, c := range calls {
			if i > 0 {
				body = append(body, '\n')
			}
			body = c.AppendRecord(body)
		}
		bodies = append(bodies, body)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(bodies); i += 4 {
				req := httptest.NewRequest("POST", "/v1/calls", bytes.NewReader(bodies[i]))
				req.Header.Set("Content-Type", "application/x-ndjson")
				rw := httptest.NewRecorder()
				h.ServeHTTP(rw, req)
				if rw.Code != http.StatusOK {
					t.Errorf("status %d: %s", rw.Code, rw.Body)
				}
			}
		}()
	}
	wg.Wait()
	// What was taken, read again from the same bodies by a receiver of its
	// own that reuses nothing across these requests.
	ref := &keepIngester{}
	rr := receiver.New(receiver.NewDefaultConfig(), dialect.Config{}, ref, nil, slog.New(slog.DiscardHandler))
	for _, body := range bodies {
		req := httptest.NewRequest("POST", "/v1/calls", bytes.NewReader(bytes.Clone(body)))
		req.Header.Set("Content-Type", "application/x-ndjson")
		rr.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, r := range ref.recs {
		want[r.Call.ID] = r.Call.Server + "|" + r.Call.Session + "|" + r.Call.Tool + "|" + string(r.Call.Arguments) + "|" + string(r.Call.Result)
	}
	if len(in.recs) != len(ref.recs) || len(in.recs) < 1000 {
		t.Fatalf("%d records taken, %d by the reference", len(in.recs), len(ref.recs))
	}
	for _, r := range in.recs {
		got := r.Call.Server + "|" + r.Call.Session + "|" + r.Call.Tool + "|" + string(r.Call.Arguments) + "|" + string(r.Call.Result)
		if w, ok := want[r.Call.ID]; !ok || got != w {
			t.Fatalf("call %s holds %q after later requests; sent %q", r.Call.ID, got, w)
		}
	}
}
