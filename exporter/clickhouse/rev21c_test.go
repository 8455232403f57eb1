package clickhouse

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// holdProxy forwards TCP connections to ClickHouse. Armed, it lets the
// first after bytes of the next insert through and holds the rest: the
// server has the query and runs it, the client sends everything and waits
// for an answer that never comes, until its InsertTimeout. The held bytes
// reach the server only once another connection has sent a SELECT and had
// its answer: the server finishes the abandoned insert after the client
// has given up and asked something else, as a server too slow for the
// client's timeout does (review rev21c, TestExactlyOnce_ServerKilled:
// "read: i/o timeout", then a block stored twice).
type holdProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	after    int64 // 0: not armed
	held     *holdConn
	released chan struct{}
	once     sync.Once
}

type holdConn struct {
	s    net.Conn
	buf  bytes.Buffer
	gone bool // the client closed its side
}

func newHoldProxy(t testing.TB, dsn string) (*holdProxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: u.Host, released: make(chan struct{})}
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.release() })
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *holdProxy) arm(after int64) {
	p.mu.Lock()
	p.after = after
	p.mu.Unlock()
}

func (p *holdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go p.pipe(c, s)
	}
}

// pipe forwards one connection both ways; the client's side decides when
// it is held.
func (p *holdProxy) pipe(c, s net.Conn) {
	var (
		mu       sync.Mutex
		sent     int64
		me       *holdConn
		selected bool // a SELECT went through after another was held
	)
	go func() { // server to client
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			p.mu.Lock()
			mu.Lock()
			// The server's answers pass until the proxy holds data: the
			// client sees the insert start (the table's header), not end.
			mine, sel := me != nil && me.buf.Len() > 0, selected
			mu.Unlock()
			p.mu.Unlock()
			if n > 0 && sel {
				p.release()
			}
			if n > 0 && !mine {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			p.mu.Lock()
			mu.Lock()
			if me == nil && p.after > 0 && bytes.Contains(buf[:n], []byte("INSERT INTO")) && p.held == nil {
				sent = 0
				me = &holdConn{s: s}
				p.held = me
			}
			if me == nil && p.held != nil && bytes.Contains(buf[:n], []byte("SELECT")) {
				selected = true
			}
			forward := buf[:n]
			if me != nil {
				if sent >= p.after {
					me.buf.Write(forward)
					forward = nil
				} else if room := p.after - sent; int64(n) > room {
					me.buf.Write(forward[room:])
					forward = forward[:room]
				}
				sent += int64(n)
			}
			mu.Unlock()
			p.mu.Unlock()
			if len(forward) > 0 {
				if _, werr := s.Write(forward); werr != nil {
					return
				}
			}
		}
		if err != nil {
			p.mu.Lock()
			if me != nil {
				me.gone = true // the server side stays open until released
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			s.Close()
			return
		}
	}
}

// release sends the held bytes to the server and closes the held
// connection's sending side, so that the server ends the insert.
func (p *holdProxy) release() {
	p.once.Do(func() {
		p.mu.Lock()
		h := p.held
		p.mu.Unlock()
		if h != nil {
			h.s.Write(h.buf.Bytes())
			if tc, ok := h.s.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		}
		close(p.released)
	})
}

// TestRev21c_RetryAfterTimeoutStoresOnce: an insert the client gives up
// on (InsertTimeout) while the server still runs it, retried at once. On
// a server without insert_deduplication_token the retry asks which rows
// are stored, and must not ask before the abandoned insert has ended: the
// rows it then commits would be stored twice (found by review rev21c in
// TestExactlyOnce_ServerKilled under load: 58,000 and 65,000 rows for
// 50,000 calls, the retry's read timed out after the restart).
func TestRev21c_RetryAfterTimeoutStoresOnce(t *testing.T) {
	serverDSN(t)
	o := testOptions(t)
	p, dsn := newHoldProxy(t, o.DSN)
	o.DSN = dsn
	o.InsertTimeout = 2 * time.Second
	o.RetryFor = 30 * time.Second
	s := openStore(t, o)
	if s.caps.DedupToken {
		t.Skip("SKIPPING: the server has insert_deduplication_token; the stored-row check is not used")
	}
	recs := synthCalls(t, 5000, time.Date(2026, 11, 4, 9, 0, 0, 0, time.UTC), "held")
	p.arm(64 << 10)
	if _, err := s.AppendCalls(context.Background(), recs); err != nil {
		t.Fatalf("AppendCalls: %v", err)
	}
	select {
	case <-p.released:
	default:
		t.Fatal("the proxy never held an insert: the test shows nothing")
	}
	// The abandoned insert ends once the server has read the held bytes.
	conn := rawConn(t, o.DSN)
	defer conn.Close()
	for range 600 {
		if count(t, conn, "SELECT count() FROM system.processes WHERE query LIKE 'INSERT INTO "+o.Database+".%'") == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantRows(t, o, "calls", "id", len(recs))
	if n := count(t, conn, "SELECT count() FROM "+o.Database+".calls FINAL"); n != uint64(len(recs)) {
		t.Errorf("calls FINAL: %d rows, want %d", n, len(recs))
	}
}
