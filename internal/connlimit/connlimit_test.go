package connlimit_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/connlimit"
)

// TestListener: past the cap a connection is answered by refuse and
// closed; once one closes, the next is accepted again. Without refuse,
// Accept waits for a slot.
func TestListener(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(tcp, 2, func(c net.Conn) { io.WriteString(c, "busy\n") })
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	defer a.Close()
	defer b.Close()
	s1, s2 := <-accepted, <-accepted
	c := dial()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if strings.TrimSpace(string(got)) != "busy" || l.Refused.Load() != 1 || l.Open() != 2 {
		t.Fatalf("third connection got %q; refused %d, open %d", got, l.Refused.Load(), l.Open())
	}
	s1.Close()
	s1.Close() // a second Close gives nothing back twice
	d := dial()
	defer d.Close()
	select {
	case s3 := <-accepted:
		s3.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted after one closed")
	}
	s2.Close()
	if l.Open() != 0 {
		t.Errorf("%d open after every accepted connection closed", l.Open())
	}

	t.Run("waiting", func(t *testing.T) {
		tcp, _ := net.Listen("tcp", "127.0.0.1:0")
		l := connlimit.New(tcp, 1, nil)
		defer l.Close()
		c1, _ := net.Dial("tcp", tcp.Addr().String())
		defer c1.Close()
		s1, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c2, _ := net.Dial("tcp", tcp.Addr().String())
		defer c2.Close()
		got := make(chan net.Conn, 1)
		go func() {
			s, err := l.Accept()
			if err == nil {
				got <- s
			}
		}()
		select {
		case <-got:
			t.Fatal("a second connection accepted at the cap")
		case <-time.After(200 * time.Millisecond):
		}
		s1.Close()
		select {
		case s := <-got:
			s.Close()
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting connection was not accepted after a slot freed")
		}
	})
}
