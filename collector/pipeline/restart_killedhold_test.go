package pipeline_test

import (
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
)

// TestRestart_KilledDuringHold is a kill -9 while the hold of an earlier
// restart is in force (found from outside, out24 D1: an OpenTelemetry
// Collector replaying its backlog after serve was down 150 s, serve killed
// in the middle and up again 30 s later). The pods' queue of a 3-minute
// outage comes back at once but for its first 5 s, which a consumer still
// backing off holds; the state file is saved with the pods' clocks at the
// end of the backlog; serve is killed and is down 30 s; the held requests
// come a minute after the second start, within the first hold's end but
// after the 40 s that 30 s of downtime gives.
//
// Without the hold in the state file, the second start held the partition
// at the pods' saved clocks, 3 minutes past the held mark, for 40 s: the
// held requests (a read settling a write before the stop among them) came
// too late, and the write's window closed without its read (a false
// unverified_write).
func TestRestart_KilledDuringHold(t *testing.T) {
	p, queue, first := heldAfterOutage(t, 3*time.Minute, nil)
	held, rest := queue[:10], queue[10:]
	p.deliver(rest)
	p.live(5)
	p.r.saved()
	killedDuringHold(t, p, first, held)
}

// TestRestart_KilledDuringHoldSavedBefore is TestRestart_KilledDuringHold
// when the engine's ticker saved the state file after the last second's
// calls and before the clock moved on (flk47). Nothing changes in the next
// second (the partition is held, the pods' clocks are as saved): the file
// is not rewritten for it (a second is within stateRefresh), and the kill
// a second later leaves it saved a second before. The start counts 31 s of
// downtime and must hold as well. The ticks are the test's
// (pipeline.SetTicks) so that the save lands there on every run; with the
// real ticker it did in 1 run in 30 at a load of 20, and the harness's wait
// for a file saved at the kill's time (run.saved) then gave up after a
// minute.
func TestRestart_KilledDuringHoldSavedBefore(t *testing.T) {
	ticks := make(chan time.Time)
	p, queue, first := heldAfterOutage(t, 3*time.Minute, func(c *pipeline.Config) { pipeline.SetTicks(c, ticks) })
	// The engine commits and saves at each tick, and at a status only
	// what is pending: a tick after each second is the ticker of a fast
	// machine, the status after it waits until the engine has done it.
	tick := func() {
		ticks <- p.clock.Now()
		p.r.status()
	}
	held, rest := queue[:10], queue[10:]
	p.deliver(rest)
	tick()
	// p.live(5), each second's calls saved before the clock moves on.
	for range 5 {
		now := p.clock.Now()
		for _, pod := range []string{"pod-0", "pod-1"} {
			p.ingest(pod, p.line(pod, now.Add(-time.Second)))
		}
		tick()
		p.clock.Add(time.Second)
	}
	tick()
	if saved, want := p.r.p.StateSaved(), p.clock.Now().Add(-time.Second); !saved.Equal(want) {
		t.Fatalf("the state file was last written at %s, not at %s (the last second's calls): the test shows nothing", saved, want)
	}
	p.r.saved()
	killedDuringHold(t, p, first, held)
}

// killedDuringHold kills the pods' run (its state file saved), keeps it
// down for 30 s and starts it again (with the ticker of every run's own:
// p.edit is dropped), checks that the hold of the first start is kept, then
// has the held requests come a minute later, and checks that nothing was
// too late or found.
func killedDuringHold(t *testing.T, p *pods, first detect.PartitionStatus, held []podRequest) {
	t.Helper()
	p.r.crash()
	p.edit = nil
	p.clock.Add(30 * time.Second)
	p.restart()
	st := p.r.status()[thegramKey]
	t.Logf("first hold: until %s at %s; after the kill: until %s at %s, watermark %s",
		first.HeldUntil.Format(time.TimeOnly), first.HeldAt.Format(time.TimeOnly),
		st.HeldUntil.Format(time.TimeOnly), st.HeldAt.Format(time.TimeOnly), st.Watermark.Format(time.TimeOnly))
	if st.HeldUntil.Before(first.HeldUntil.Add(-time.Second)) {
		t.Errorf("after the kill the hold ends at %s, before the first hold's end %s", st.HeldUntil, first.HeldUntil)
	}
	if st.HeldAt.After(first.HeldAt) {
		t.Errorf("after the kill the partition is held at %s, past the first hold's mark %s", st.HeldAt, first.HeldAt)
	}
	p.live(60)
	p.deliver(held)
	p.live(30)
	p.settled(2*(30+5+180+5+60+30) + 2)
}

// TestRestart_KilledDuringHoldSendersAway is TestRestart_KilledDuringHold
// when the senders had not got through again before the kill (found from
// outside, out25 O1: a Collector whose consumers were still backing off
// after the first outage of 2m31s did not deliver in the 40 s serve was up
// before its kill -9, and came back 1m10s to 1m47s after the second start,
// after the first hold's end): the second start holds for the outage the
// senders saw, from their last delivery, not for its own 30 s, and the
// backlog's oldest requests, coming after the first hold's end, are
// judged.
func TestRestart_KilledDuringHoldSendersAway(t *testing.T) {
	p, queue, first := heldAfterOutage(t, 150*time.Second, nil)
	// Up for 40 s, nothing delivered; killed; down for 30 s.
	p.clock.Add(40 * time.Second)
	p.r.saved()
	p.r.crash()
	p.clock.Add(30 * time.Second)
	p.restart()
	st := p.r.status()[thegramKey]
	t.Logf("first hold: until %s at %s; after the kill: until %s at %s, watermark %s",
		first.HeldUntil.Format(time.TimeOnly), first.HeldAt.Format(time.TimeOnly),
		st.HeldUntil.Format(time.TimeOnly), st.HeldAt.Format(time.TimeOnly), st.Watermark.Format(time.TimeOnly))
	// The senders come back a minute later: the first consumer takes the
	// rest of the queue, live traffic follows, and the consumer still
	// backing off brings the oldest requests after the first hold's end.
	p.clock.Add(60 * time.Second)
	held, rest := queue[:10], queue[10:]
	p.deliver(rest)
	p.live(40)
	if !p.clock.Now().After(first.HeldUntil) {
		t.Fatalf("the oldest requests come at %s, within the first hold (until %s): the test shows nothing", p.clock.Now(), first.HeldUntil)
	}
	p.deliver(held)
	// Past the second hold's end: the calls are judged.
	p.live(100)
	if st := p.r.status()[thegramKey]; !st.HeldUntil.IsZero() {
		t.Fatalf("still held until %s at the end", st.HeldUntil)
	}
	p.settled(2*(30+5+150+40+100) + 2)
}

// thegramKey is the partition of the pods' traffic.
var thegramKey = detect.PartitionKey{Server: "thegram"}

// heldAfterOutage runs the pods for 30 s, stops the run with a write
// pending (stopWithWrite), keeps it down for down and starts it again. It
// returns the pods, their senders' queue of the outage and thegram's status
// after the start, which holds the partition for their backlog. edit, when
// set, edits the pipeline's config of that start (pods.edit).
func heldAfterOutage(t *testing.T, down time.Duration, edit func(*pipeline.Config)) (*pods, []podRequest, detect.PartitionStatus) {
	t.Helper()
	p := newPods(t)
	p.live(30)
	queue := p.stopWithWrite(down)
	p.clock.Add(down)
	p.edit = edit
	p.restart()
	first := p.r.status()[thegramKey]
	if first.HeldUntil.IsZero() {
		t.Fatalf("no hold after the first restart: %+v", first)
	}
	return p, queue, first
}
