package detect

import (
	"bytes"
	"io"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// leanRecord decodes one call record line and reads it as the live
// service keeps it: lean, without payloads.
func leanRecord(t testing.TB, rd *dialect.Reader, line []byte) *audit.Record {
	t.Helper()
	dec, err := capture.NewDecoder(bytes.NewReader(line), "line")
	if err != nil {
		t.Fatal(err)
	}
	c, err := dec.Next()
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return rd.Read(c).Lean()
}
