package pipeline

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/capture"
	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/dialect"
)

// freedRig is a pipeline's state-file bookkeeping over an engine, driven
// step by step: which goroutine does what, and in which order, is the
// test's to choose.
type freedRig struct {
	t    *testing.T
	p    *Pipeline
	path string
	wall time.Time
	// each, when set, is called at each minute expire moves the clock.
	each func()
}

func newFreedRig(t *testing.T) *freedRig {
	dcfg := detect.NewDefaultConfig()
	g := newGate(nil, nil)
	eng := detect.NewEngine(dcfg, g)
	eng.ClockPerPartition()
	g.eng = eng
	rig := &freedRig{t: t, path: filepath.Join(t.TempDir(), "partitions.json"), wall: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)}
	rig.p = &Pipeline{
		cfg: Config{StateFile: rig.path}, dcfg: dcfg, eng: eng, gate: g, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		now: func() time.Time { return rig.wall }, queued: map[int64]int{}, freed: map[detect.PartitionKey]freedMark{},
	}
	return rig
}

// batch is a batch of one gram_patch left pending, of thegram, at t.
func (r *freedRig) batch(rpc int, t time.Time) audit.Batch {
	line := fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_patch","arguments":{"path":"a.gram","base_revision":3,"expected_hash":"aa","request_id":"req-%d","operations":[{"op":"append_block","target":"h1","text":"x"}]}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"a.gram","rev":4,"hash":"bb","replayed":false,"request_id":"req-%d","sync":{"state":"pending"}}}}}`,
		t.Format(time.RFC3339Nano), rpc, rpc, rpc, rpc, rpc)
	dec, err := capture.NewDecoder(bytes.NewReader(line), "capture")
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := dec.Next()
	if err != nil {
		r.t.Fatal(err)
	}
	return audit.Batch{Source: "poster", Records: []*audit.Record{dialect.NewReader(dialect.Config{}).Read(c)}}
}

// ack acknowledges b, its floor written first (lowerFloor), and hands it
// to the engine (take).
func (r *freedRig) ack(b audit.Batch) {
	r.p.lowerFloor(earliest(b))
	r.take(b)
}

// freedOnDisk has thegram take a write a minute old, left pending, frees
// the partition as idle once its window closed, and saves: the state
// file keeps it freed (else the test shows nothing). It returns the
// watermark it was freed at and the write's time.
func (r *freedRig) freedOnDisk() (wm, first time.Time) {
	r.t.Helper()
	b := r.batch(1, r.wall.Add(-time.Minute))
	r.ack(b)
	wm = r.expire()
	r.save()
	if _, kept := r.restart(); !kept {
		r.t.Fatal("the state file does not keep thegram freed: the test shows nothing")
	}
	return wm, b.Records[0].Call.Time
}

// take hands b to the engine, as the engine goroutine does with a batch
// acknowledged and queued.
func (r *freedRig) take(b audit.Batch) {
	for _, rec := range b.Records {
		r.p.eng.Add(b.Source, rec, r.wall)
	}
	r.p.dequeued(earliest(b), false)
}

// expire moves the wall clock on until the engine frees thegram as idle,
// as the engine goroutine does after a commit; it returns the watermark
// it was freed at.
func (r *freedRig) expire() time.Time {
	r.t.Helper()
	for range 300 { // an idempotency key is kept for an hour
		r.wall = r.wall.Add(time.Minute)
		if r.each != nil {
			r.each()
		}
		r.p.eng.Tick(r.wall)
		freed := r.p.eng.ExpireIdle(r.wall, time.Minute)
		r.p.free(freed)
		for _, f := range freed {
			if f.Server != "thegram" {
				continue
			}
			if f.Watermark.IsZero() {
				r.t.Fatal("freed with no watermark")
			}
			return f.Watermark
		}
	}
	r.t.Fatal("thegram was never freed as idle")
	return time.Time{}
}

// save writes the state file as a commit does.
func (r *freedRig) save() {
	r.wall = r.wall.Add(time.Second)
	r.p.saveMarks(marksOf(r.p.eng, r.wall), true)
}

// restart tells what a restart on the state file as it is now would take
// as committed of thegram: committed reports whether the file stands for
// its output dated t as committed (the replay passes over its calls so
// covered: nothing of them is made again).
func (r *freedRig) restart() (committed func(t time.Time) bool, kept bool) {
	_, freed, floor, _, lost, _ := readMarks(r.path, time.Now(), r.p.log)
	if lost {
		r.t.Fatal("the state file is lost")
	}
	wm, kept := freed[detect.PartitionKey{Server: "thegram"}]
	return func(t time.Time) bool { return kept && freedCovers(wm, floor, t) }, kept
}

// TestFreed_AckedAroundTheFreeing: a batch of a partition is acknowledged
// (its calls stored, the state file's floor made to reach them) while the
// engine, which has not taken it yet, frees the partition as idle. Its
// write is dated before the watermark the partition is freed at (a late
// backlog). A crash at any point after the acknowledgement must not let a
// restart take the write's output as committed (review12c's D2): while
// the batch is queued the file's floor covers it, and once the engine
// has taken it the partition is begun anew (a greater Gen) and the file
// no longer keeps it as freed.
func TestFreed_AckedAroundTheFreeing(t *testing.T) {
	r := newFreedRig(t)
	// The window (5 min) closes with the wall clock; committed; freed.
	wm, first := r.freedOnDisk()
	if committed, _ := r.restart(); !committed(first) {
		t.Fatal("a restart now does not take the freed partition's output as committed: the test shows nothing")
	}

	// Acknowledged before the partition is freed again, taken after.
	r.wall = r.wall.Add(time.Second)
	late := r.batch(2, wm.Add(-6*time.Minute))
	at := late.Records[0].Call.Time
	if err := r.p.lowerFloor(at); err != nil {
		t.Fatal(err)
	}
	// Freed now at a watermark past the late write (nothing of the
	// partition is in the engine: its entry is renewed at that watermark).
	r.p.free([]detect.Freed{{PartitionKey: detect.PartitionKey{Server: "thegram"}, Gen: r.p.eng.Made(), Watermark: wm}})
	r.save()
	if committed, kept := r.restart(); !kept || committed(at) || committed(at.Add(5*time.Minute)) {
		t.Errorf("crash with the batch queued: the restart takes the late write's output as committed (kept %v)", kept)
	}
	r.take(late)
	if committed, _ := r.restart(); committed(at) || committed(at.Add(5*time.Minute)) {
		t.Error("crash after the batch was taken, before a save: the restart takes the late write's output as committed")
	}
	r.save()
	if committed, kept := r.restart(); kept || committed(at) {
		t.Errorf("the partition was begun anew and the state file still keeps it as freed (kept %v)", kept)
	}
}

// TestFreed_AckedAfterTheFreeing: a call of a freed partition that comes
// after the freeing drops it from what the pipeline keeps and from the
// state file before the call is stored (comeback), even when the call is
// dated from the file's floor on: a restart on the file as it is then
// does not take the call's output as committed.
func TestFreed_AckedAfterTheFreeing(t *testing.T) {
	r := newFreedRig(t)
	// Another server, its poster's clock 30 minutes slow, holds the floor:
	// it keeps sending.
	rpc := 100
	r.each = func() {
		rpc++
		b := r.batch(rpc, r.wall.Add(-30*time.Minute))
		b.Source = "lagging"
		for _, rec := range b.Records {
			rec.Call.Server = "other"
		}
		r.ack(b)
	}
	r.each()
	wm, _ := r.freedOnDisk()
	before, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	late := r.batch(3, wm.Add(-6*time.Minute))
	at := late.Records[0].Call.Time
	if !at.After(r.p.floor) {
		t.Fatalf("the late write at %v is not after the floor %v: the test shows nothing", at, r.p.floor)
	}
	arrived, err := r.p.comeback([]audit.Batch{late})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.p.lowerFloor(at); err != nil {
		t.Fatal(err)
	}
	arrived()
	if _, ok := r.p.freed[detect.PartitionKey{Server: "thegram"}]; ok {
		t.Error("the partition is still kept as freed after a call of it was acknowledged")
	}
	if after, _ := os.ReadFile(r.path); bytes.Equal(before, after) {
		t.Error("the state file was not written before the call was stored")
	}
	committed, kept := r.restart()
	if kept {
		t.Error("the state file still keeps the partition as freed once a call of it is stored")
	}
	if committed(at) || committed(at.Add(5*time.Minute)) || committed(r.p.floor.Add(-time.Second)) {
		t.Error("a crash then: the restart takes the partition's output as committed")
	}
	r.save()
	if _, kept := r.restart(); kept {
		t.Error("the next save still keeps the partition as freed")
	}
}
