package wrap

import (
	"errors"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/tap"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
)

// Relay connects a client's stdin and stdout to a child MCP server.
type Relay struct {
	// Recorder receives copies of the messages. Required.
	Recorder *tap.Recorder
	// Metrics may be nil.
	Metrics *metrics.Relay
	// MaxMessageBytes bounds the messages recorded; 0 means
	// tap.DefaultMaxMessageBytes. Longer lines pass through unrecorded.
	MaxMessageBytes int
}

// Run starts cmd with its stdin and stdout relayed to and from the client's
// stdin and stdout, and waits until the child has exited and its output is
// relayed. cmd.Stderr is left to the caller (normally the wrapper's own
// stderr, so that it passes untouched). It returns the child's exit status:
// its code, or 128 plus the signal that ended it. Requests still in flight
// when the child exits are recorded as canceled if the client had closed
// its input first, else as connection_reset; a request the relay could not
// write at all to a child already gone is recorded as not_sent.
func (rl *Relay) Run(cmd *exec.Cmd, stdin io.Reader, stdout io.Writer) (int, error) {
	childIn, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	childOut, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var clientGone atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Client to server. This goroutine may stay blocked on the
		// client's stdin after the child exits; the caller exits then.
		defer wg.Done()
		lines := tap.Lines{Max: rl.MaxMessageBytes}
		buf := make([]byte, 64<<10)
		var fresh []sentAt // the requests that begin in buf
		for {
			n, rerr := stdin.Read(buf)
			if n > 0 {
				before := lines.Oversized
				fresh = fresh[:0]
				lines.FeedAt(buf[:n], func(l []byte, start int) {
					if keys := rl.fromClient(l); len(keys) > 0 && start >= 0 {
						fresh = append(fresh, sentAt{keys, start})
					}
				})
				if lines.Oversized > before {
					rl.Metrics.Unrecorded(metrics.UnrecordedOversized)
				}
				if w, werr := childIn.Write(buf[:n]); werr != nil {
					// The child is gone. A request of which no byte
					// went into its stdin never reached it; one cut
					// in the middle, or written whole before the
					// child died, may have.
					for _, f := range fresh {
						if f.start >= w {
							rl.Recorder.Fail(f.keys, tap.ErrNotSent, time.Now())
						}
					}
					rl.Metrics.SetInflight(rl.Recorder.Len())
					return
				}
			}
			if rerr != nil {
				if l := lines.Rest(); len(l) > 0 {
					rl.fromClient(l)
				}
				clientGone.Store(true)
				childIn.Close()
				return
			}
		}
	}()
	// Server to client, until the child closes its stdout. A line too
	// large to record that answers a call ends it unrecorded: recorded at
	// the child's exit without its answer, it would read as a call nobody
	// answered (adv23's D2, seen through the proxy).
	// One whose id cannot be read may have answered any call in flight:
	// those are not recorded as unanswered at the exit.
	var bigAt time.Time
	lines := tap.Lines{Max: rl.MaxMessageBytes, Big: func(prefix []byte) {
		switch id, ok, other := tap.ResponseID(prefix); {
		case ok:
			rl.Recorder.Unrecordable(nil, "", 0, id)
		case !other:
			bigAt = time.Now()
		}
	}}
	buf := make([]byte, 64<<10)
	stdoutOK := true
	for {
		n, rerr := childOut.Read(buf)
		if n > 0 {
			before := lines.Oversized
			lines.Feed(buf[:n], rl.fromServer)
			if lines.Oversized > before {
				rl.Metrics.Unrecorded(metrics.UnrecordedOversized)
			}
			if stdoutOK {
				if _, werr := stdout.Write(buf[:n]); werr != nil {
					// The client stopped reading: it is gone. Keep
					// draining so that the child is not blocked.
					stdoutOK = false
					clientGone.Store(true)
				}
			}
		}
		if rerr != nil {
			if l := lines.Rest(); len(l) > 0 {
				rl.fromServer(l)
			}
			break
		}
	}
	werr := cmd.Wait()
	reason := tap.ErrConnectionReset
	if clientGone.Load() {
		reason = tap.ErrCanceled
	}
	if !bigAt.IsZero() {
		rl.Recorder.ForgetIf(func(_ string, at time.Time) bool { return !bigAt.Before(at) })
	}
	rl.Recorder.Close(reason, time.Now())
	rl.Metrics.SetInflight(0)
	return exitStatus(cmd, werr)
}

// sentAt is the tools/call requests of one line and where the line began
// in the piece read from the client.
type sentAt struct {
	keys  []tap.Key
	start int
}

// fromClient records the messages of one client line and returns the keys
// of its tools/call requests.
func (rl *Relay) fromClient(line []byte) []tap.Key {
	now := time.Now()
	msgs, err := tap.Parse(line)
	if err != nil {
		rl.Metrics.Unrecorded(metrics.UnrecordedInvalid)
	}
	for i := range msgs {
		if c := tap.ClientInfo(&msgs[i]); c != "" {
			rl.Recorder.SetClient("", c)
		}
	}
	keys := rl.Recorder.FromClient("", 0, msgs, now)
	rl.Metrics.SetInflight(rl.Recorder.Len())
	return keys
}

func (rl *Relay) fromServer(line []byte) {
	now := time.Now()
	msgs, err := tap.Parse(line)
	if err != nil {
		rl.Metrics.Unrecorded(metrics.UnrecordedInvalid)
	}
	rl.Recorder.FromServer("", 0, msgs, now)
	rl.Metrics.SetInflight(rl.Recorder.Len())
}

// exitStatus turns the result of Wait into the status a shell would show.
func exitStatus(cmd *exec.Cmd, err error) (int, error) {
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, err
	}
	ps := cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}
