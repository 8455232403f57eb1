// Package connlimit caps the connections a listener holds open at once, so
// that a flood of held connections (slowloris) on one listener cannot take
// it, or the others, offline. Past the cap a connection is either answered
// at once and closed (HTTP: 503 with Retry-After, instead of waiting in the
// kernel's backlog with no answer) or, for protocols without such an
// answer, accepted only when a slot frees.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener with a cap on open connections.
type Listener struct {
	net.Listener
	max    int64
	open   atomic.Int64
	refuse func(net.Conn)
	// slots blocks Accept at the cap when refuse is nil.
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	// Refused counts the connections refused.
	Refused atomic.Int64
}

// New wraps ln. At most max connections are open at once. When refuse is
// set, a connection past the cap is handed to it (in its own goroutine) and
// then closed; when nil, Accept waits for a slot.
func New(ln net.Listener, max int, refuse func(net.Conn)) *Listener {
	l := &Listener{Listener: ln, max: int64(max), refuse: refuse, closed: make(chan struct{})}
	if refuse == nil {
		l.slots = make(chan struct{}, max)
	}
	return l
}

// Open returns the connections open now.
func (l *Listener) Open() int64 { return l.open.Load() }

// Accept returns the next connection within the cap.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		if l.slots != nil {
			select {
			case l.slots <- struct{}{}:
			case <-l.closed:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			if l.slots != nil {
				<-l.slots
			}
			return nil, err
		}
		if l.slots == nil && l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.Refused.Add(1)
			go func() {
				defer c.Close()
				l.refuse(c)
			}()
			continue
		}
		if l.slots != nil {
			l.open.Add(1)
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Close closes the listener; an Accept waiting for a slot returns.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// conn gives its slot back when closed, once.
type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		if c.l.slots != nil {
			<-c.l.slots
		}
	})
	return err
}
