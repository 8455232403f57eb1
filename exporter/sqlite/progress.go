package sqlite

import (
	"log/slog"
	"sync"
	"time"
)

// progressEvery is how often a long open (a migration, a rebuild of the id
// index) logs how far it got. A variable for tests.
var progressEvery = 5 * time.Second

// progress logs how far a long step of Open got: an operator waiting for a
// store that does not answer yet sees it move. A nil progress logs nothing.
type progress struct {
	log    *slog.Logger
	report func(Progress) // Options.OnProgress, or nil
	msg    string
	total  int64 // calls to do
	done   int64 // calls done, as the last step said
	start  time.Time
	last   time.Time
}

// Progress is how far a long step of Open (a migration, a build of the
// id index) got, as Options.OnProgress is told.
type Progress struct {
	// Step says what runs, as the log's lines say it: "migrating the
	// store" or "building the call id index".
	Step string
	// Done of Total calls are through.
	Done, Total int64
}

func newProgress(log *slog.Logger, msg string, total int64) *progress {
	now := time.Now()
	return &progress{log: log, msg: msg, total: total, start: now, last: now}
}

// reportTo tells report the step's start now and every step after. It
// returns p.
func (p *progress) reportTo(report func(Progress)) *progress {
	if p != nil && report != nil {
		p.report = report
		report(Progress{Step: p.msg, Done: p.done, Total: p.total})
	}
	return p
}

// step reports done calls of total, and logs them when progressEvery
// passed since the last line.
func (p *progress) step(done int64) {
	if p == nil {
		return
	}
	p.done = done
	if p.report != nil {
		p.report(Progress{Step: p.msg, Done: done, Total: p.total})
	}
	now := time.Now()
	if now.Sub(p.last) < progressEvery {
		return
	}
	p.last = now
	p.log.Info(p.msg, "done", done, "calls", p.total, "elapsed", p.elapsed())
}

// elapsed is the time since the step began, to the millisecond.
func (p *progress) elapsed() time.Duration { return time.Since(p.start).Round(time.Millisecond) }

// heartbeat logs msg every progressEvery (at least every millisecond)
// until the returned function is called: a long statement that cannot
// count its rows (an index sort) still shows that it runs. A nil progress
// logs nothing.
func (p *progress) heartbeat(msg string) (stop func()) {
	if p == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(max(progressEvery, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.log.Info(msg, "calls", p.total, "elapsed", p.elapsed())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
