package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/collector/detect"
)

var thegram = detect.PartitionKey{Server: "thegram"}

// beginAnewAroundFreeing: thegram freed and kept on disk; a batch B
// acknowledged before a second freeing and taken after it (the engine
// begins thegram anew: TestFreed_AckedAroundTheFreeing). Returns the
// freed watermark and B's time; the file on disk keeps thegram freed.
func beginAnewAroundFreeing(t *testing.T, r *freedRig) (wm, atB time.Time) {
	wm, _ = r.freedOnDisk()
	r.wall = r.wall.Add(time.Second)
	b := r.batch(2, wm.Add(-6*time.Minute))
	atB = b.Records[0].Call.Time
	arrived, err := r.p.comeback([]audit.Batch{b})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.p.lowerFloor(atB); err != nil {
		t.Fatal(err)
	}
	arrived()
	// freed again (nothing of it in the engine), saved, then B is taken
	r.p.free([]detect.Freed{{PartitionKey: thegram, Gen: r.p.eng.Made(), Watermark: wm}})
	r.save()
	if _, kept := r.restart(); !kept {
		t.Fatal("file does not keep thegram freed: test shows nothing")
	}
	r.take(b)
	return wm, atB
}

// TestFreed_PruneThenThrottledSaveForgetsDiskEntry: pruneFreed drops
// thegram (begun anew) from p.freed, but saveMarks then returns without
// writing (less than a second since the last save: every commit tick is
// 100 ms). The file on disk still keeps thegram freed, and neither freed
// nor stale says so: a late call's comeback writes nothing, the call is
// stored, the process dies before lowerFloor.
func TestFreed_PruneThenThrottledSaveForgetsDiskEntry(t *testing.T) {
	r := newFreedRig(t)
	wm, atB := beginAnewAroundFreeing(t, r)
	// engine goroutine, next commit tick, same second as the last save
	r.p.saveMarks(marksOf(r.p.eng, r.wall), false)
	_, inMem := r.p.freed[thegram]
	_, kept := r.restart()
	t.Logf("after throttled save: in p.freed %v, stale %v, file keeps %v", inMem, r.p.stale[thegram], kept)
	before, _ := os.ReadFile(r.path)
	late := r.batch(3, atB.Add(-10*time.Minute))
	at := late.Records[0].Call.Time
	if _, err := r.p.comeback([]audit.Batch{late}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(r.path)
	// p.append stores late; crash before lowerFloor
	committed, kept := r.restart()
	t.Logf("wm %v, B at %v, late at %v, file rewritten by comeback %v, kept %v", wm, atB, at, string(before) != string(after), kept)
	if kept && (committed(at) || committed(at.Add(5*time.Minute))) {
		t.Errorf("late call stored under a file keeping thegram freed: output at %v / window end %v taken as committed (%v/%v)", at, at.Add(5*time.Minute), committed(at), committed(at.Add(5*time.Minute)))
	}
}

// TestFreed_PruneThenFailedSaveAcksUnderFreedFile (found by review13e): as above with the
// state file unwritable: the save after pruneFreed fails, and the late
// call is then not refused (comeback returns nil) although the file on
// disk keeps thegram freed; lowerFloor fails too and the call is
// acknowledged. Docs: "When the file cannot be written, the call is
// refused (503)".
func TestFreed_PruneThenFailedSaveAcksUnderFreedFile(t *testing.T) {
	r := newFreedRig(t)
	_, atB := beginAnewAroundFreeing(t, r)
	saved, _ := os.ReadFile(r.path)
	os.Remove(r.path)
	os.MkdirAll(filepath.Join(r.path, "x"), 0o755) // unwritable
	r.save()                                       // prunes thegram, write fails
	late := r.batch(3, atB.Add(-10*time.Minute))
	at := late.Records[0].Call.Time
	arrived, err := r.p.comeback([]audit.Batch{late})
	if err == nil {
		// stored; lowerFloor fails (warn) and the call is acknowledged
		lerr := r.p.lowerFloor(at)
		arrived()
		t.Errorf("comeback with the file unwritable and keeping thegram freed: nil (lowerFloor: %v), the call acknowledged; want refused", lerr)
	}
	os.RemoveAll(r.path)
	os.WriteFile(r.path, saved, 0o644) // what the disk holds; crash
	committed, kept := r.restart()
	if err == nil && kept && (committed(at) || committed(at.Add(5*time.Minute))) {
		t.Errorf("late call acknowledged with the file unwritable and keeping thegram freed: output at %v taken as committed after a crash (%v/%v)", at, committed(at), committed(at.Add(5*time.Minute)))
	}
}

// TestFreed_EvictedFreedEntryStillOnDisk (found by review13e): free evicts past maxFreed
// the entry with the earliest watermark, on disk, from p.freed; the next
// save comes a commit tick later at the earliest (expireIdle runs after
// commit). A late call of it in between: comeback writes nothing.
func TestFreed_EvictedFreedEntryStillOnDisk(t *testing.T) {
	r := newFreedRig(t)
	wm, _ := r.freedOnDisk()
	var others []detect.Freed
	for i := range maxFreed {
		others = append(others, detect.Freed{PartitionKey: detect.PartitionKey{Server: fmt.Sprint("o", i)}, Gen: 1, Watermark: wm.Add(time.Minute)})
	}
	r.p.free(others) // engine goroutine: expireIdle after a commit
	_, inMem := r.p.freed[thegram]
	late := r.batch(3, wm.Add(-6*time.Minute))
	at := late.Records[0].Call.Time
	if _, err := r.p.comeback([]audit.Batch{late}); err != nil {
		t.Fatal(err)
	}
	committed, kept := r.restart()
	t.Logf("thegram in p.freed after eviction %v; file keeps it %v", inMem, kept)
	if kept && (committed(at) || committed(at.Add(5*time.Minute))) {
		t.Errorf("late call stored under a file keeping thegram freed (evicted in memory only): output at %v taken as committed", at)
	}
}

// BenchmarkComebackKeys: comeback's cost per request with no
// partition freed (the usual case: before 06dff5c it returned at once),
// for one batch of n records over k servers.
func BenchmarkComebackKeys(b *testing.B) {
	for _, c := range []struct{ n, k int }{{1000, 1}, {1000, 1000}, {5000, 5000}} {
		b.Run(fmt.Sprintf("n%d_k%d", c.n, c.k), func(b *testing.B) {
			r := newFreedRig(&testing.T{})
			r.p.cfg.StateFile = filepath.Join(b.TempDir(), "partitions.json")
			proto := r.batch(1, r.wall)
			bt := audit.Batch{Source: "poster"}
			for i := range c.n {
				rec := *proto.Records[0]
				call := *rec.Call
				call.Server = fmt.Sprint("s", i%c.k)
				rec.Call = &call
				bt.Records = append(bt.Records, &rec)
			}
			b.ResetTimer()
			for range b.N {
				arrived, err := r.p.comeback([]audit.Batch{bt})
				if err != nil {
					b.Fatal(err)
				}
				arrived()
			}
		})
	}
}
