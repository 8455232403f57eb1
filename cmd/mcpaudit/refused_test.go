package main

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// refusedPort is a TCP port of 127.0.0.1 bound by the test and not
// listened on: a connection to it is refused, and no other listener of
// the machine can take it while the test runs. A port taken with
// net.Listen and closed again (freePort) is free for anyone: under load
// another test's server got it, and a test expecting "connection refused"
// got that server's 400 (TestProxy_RetryAfterNotSent, in two runs of
// 2026-12-06) or its acknowledgements (TestLoadgen_ReportsUnsent).
type refusedPort struct {
	fd   int
	Addr string
}

func newRefusedPort(t *testing.T) *refusedPort {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	p := &refusedPort{fd: fd, Addr: "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)}
	t.Cleanup(func() {
		if p.fd >= 0 {
			syscall.Close(p.fd)
		}
	})
	return p
}

// Listen starts listening on the port and returns its listener: from then
// on connections are taken.
func (p *refusedPort) Listen(t *testing.T) net.Listener {
	t.Helper()
	if err := syscall.Listen(p.fd, 128); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(p.fd), p.Addr)
	p.fd = -1
	ln, err := net.FileListener(f) // a duplicate of the descriptor
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestRefusedPort: a connection to the port is refused until Listen, then
// taken.
func TestRefusedPort(t *testing.T) {
	p := newRefusedPort(t)
	if c, err := net.Dial("tcp", p.Addr); err == nil {
		c.Close()
		t.Fatalf("a connection to %s was taken before Listen", p.Addr)
	}
	ln := p.Listen(t)
	defer ln.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatalf("after Listen: %v", err)
	}
	c.Close()
}
