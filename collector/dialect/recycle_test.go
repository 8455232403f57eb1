package dialect_test

import (
	"bytes"
	"io"
	"reflect"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

// TestRecycle: a reader given back each record once read fills the same
// blocks again, and reads every call as a reader that allocates each
// record: the reading and the call, operations included, and the records
// read before are no longer looked at.
func TestRecycle(t *testing.T) {
	c := capgen.Generate(capgen.Config{Seed: 3, Sessions: 300, AnomalyRate: 0.3, NoiseRate: 0.001})
	data := bytes.Join(c.Lines, []byte("\n"))
	fresh, recycled := dialect.NewReader(dialect.Config{}), dialect.NewReader(dialect.Config{})
	decA, err := capture.NewDecoder(bytes.NewReader(data), "a")
	if err != nil {
		t.Fatal(err)
	}
	decB, _ := capture.NewDecoder(bytes.NewReader(data), "a")
	decA.DropPayloads()
	decB.DropPayloads()
	given := map[*audit.Record]bool{}
	n, reused, runs := 0, 0, 0
	for {
		a, errA := decA.NextRecord(fresh)
		b, errB := decB.NextRecord(recycled)
		if errA == io.EOF && errB == io.EOF {
			break
		}
		if (errA == nil) != (errB == nil) {
			t.Fatalf("call %d: errors %v and %v", n, errA, errB)
		}
		if errA != nil {
			continue // a bad line, refused alike
		}
		if given[b] {
			reused++
		}
		if b.Dialect == dialect.Oddlynew && len(b.Ops) > 0 {
			runs++
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("call %d read differently once recycled:\n%+v\n%+v", n, a, b)
		}
		recycled.Recycle(b)
		given[b] = true
		n++
	}
	if n < 500 || runs == 0 || reused < n-10 {
		t.Fatalf("%d calls (%d Oddlynew runs), %d in a block given back", n, runs, reused)
	}

	// A record that ReadCopy did not make is not filled again.
	r := dialect.NewReader(dialect.Config{})
	dec, _ := capture.NewDecoder(bytes.NewReader(data), "a")
	call, err := dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	own := r.Read(call)
	r.Recycle(own)
	r.Recycle(nil)
	next, err := dec.NextRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if next == own || next.Call == call {
		t.Fatal("a record of Read was filled again")
	}
}
