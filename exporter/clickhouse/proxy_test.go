package clickhouse

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// proxy forwards TCP connections to ClickHouse and cuts them on request, to
// put a batch in the two ambiguous places of an insert: data half sent (the
// server never commits it), and data fully sent but the acknowledgement lost
// (the server commits it, the client does not know).
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	plan  *cutPlan
	down  bool // refuse every connection, as a stopped server does

	// dropped counts the server bytes withheld from the client by a
	// dropAck plan: a server answer after the data is the proof that the
	// server finished the insert.
	dropped atomic.Int64
	cuts    atomic.Int64
}

// cutPlan says what to do once the client has sent after bytes since the
// plan was armed.
type cutPlan struct {
	after int64
	// dropAck: keep forwarding the client, withhold the server's answers,
	// and close both sides once the client has been quiet for a while.
	// Otherwise close both sides at once.
	dropAck bool
	sent    int64
	last    time.Time // of the last client bytes
	fired   bool
	done    bool // the connections were cut; new ones pass
}

func newProxy(t testing.TB, dsn string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: u.Host}
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.upstream(c, s)
		go p.downstream(s, c)
	}
}

// setDown cuts every connection and refuses new ones (true), or lets them
// through again (false).
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cutAll()
	}
}

// arm sets the next cut.
func (p *proxy) arm(plan *cutPlan) {
	p.mu.Lock()
	p.plan = plan
	p.mu.Unlock()
}

// fired reports whether the armed plan has cut.
func (p *proxy) fired() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.plan != nil && p.plan.fired
}

func (p *proxy) upstream(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			plan := p.plan
			cut := false
			if plan != nil {
				plan.last = time.Now()
			}
			if plan != nil && !plan.fired {
				plan.sent += int64(n)
				if plan.sent >= plan.after {
					plan.fired = true
					cut = !plan.dropAck
					if plan.dropAck {
						go p.closeWhenQuiet(plan)
					}
				}
			}
			p.mu.Unlock()
			if cut {
				// Forward part of this read only: the server sees a
				// truncated block.
				s.Write(buf[:n/2])
				p.mu.Lock()
				plan.done = true
				p.mu.Unlock()
				p.cutAll()
				return
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			s.Close()
			return
		}
	}
}

func (p *proxy) downstream(s, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.mu.Lock()
			withhold := p.plan != nil && p.plan.dropAck && p.plan.fired && !p.plan.done
			p.mu.Unlock()
			if withhold {
				p.dropped.Add(int64(n))
			} else if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			c.Close()
			return
		}
	}
}

// closeWhenQuiet waits until the client has sent everything (it has been
// quiet for a while) and the server has answered, then cuts every
// connection, so that the client never sees the answer.
func (p *proxy) closeWhenQuiet(plan *cutPlan) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		quiet := time.Since(plan.last) > 300*time.Millisecond
		p.mu.Unlock()
		if quiet && p.dropped.Load() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the server finish its answer
	p.mu.Lock()
	plan.done = true
	p.mu.Unlock()
	p.cutAll()
}

func (p *proxy) cutAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.cuts.Add(1)
}

func (p *proxy) close() {
	p.ln.Close()
	p.cutAll()
}
