package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// gramRead returns, as the engine takes it, call id's read of thegram in
// session s<id%7>, dated at.
func gramRead(t *testing.T, rd *dialect.Reader, at time.Time, id int) *audit.Record {
	t.Helper()
	line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false}}}`,
		at.Format(time.RFC3339Nano), id%7, id, id)
	dec, err := capture.NewDecoder(bytes.NewReader(line), "line")
	if err != nil {
		t.Fatal(err)
	}
	c, err := dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	return rd.Read(c).Lean()
}

// statusBody answers GET /api/v1/status over parts, and fails the test
// unless it is 200.
func statusBody(t *testing.T, parts []detect.PartitionStatus) []byte {
	t.Helper()
	s := newStatusServer(t, parts)
	code, _, body := do(t, http.MethodGet, s+"/api/v1/status", "")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	return body
}

// statusOf is statusBody's answer decoded.
func statusOf(t *testing.T, parts []detect.PartitionStatus) api.StatusResponse {
	t.Helper()
	var got api.StatusResponse
	if err := json.Unmarshal(statusBody(t, parts), &got); err != nil {
		t.Fatal(err)
	}
	return got
}
