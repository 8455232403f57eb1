package receiver

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestWaitReader: the body timeout is a budget of the time spent waiting
// for a body's bytes. A body that has arrived is read whole however long
// the server works between its reads (a gzip bomb decompressed on a loaded
// machine was answered 408); once the body stops arriving, a read waits
// out what is left of the budget and fails as a timeout, answered 408.
func TestWaitReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// 16 KiB fit the socket buffers: the whole body has arrived.
	body := bytes.Repeat([]byte("x"), 16<<10)
	if _, err := client.Write(body); err != nil {
		t.Fatal(err)
	}
	const budget = 500 * time.Millisecond
	wr := &waitReader{r: server, deadline: server.SetReadDeadline, left: budget}
	var got []byte
	buf := make([]byte, 2<<10)
	start := time.Now()
	for len(got) < len(body) {
		n, err := wr.Read(buf)
		if err != nil {
			t.Fatalf("after %d of %d bytes that had arrived, %s into the body: %v", len(got), len(body), time.Since(start).Round(time.Millisecond), err)
		}
		got = append(got, buf[:n]...)
		// The server's own work on what it read: 8 reads of 100 ms
		// each, more than the budget in all.
		time.Sleep(100 * time.Millisecond)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes, not the body sent", len(got))
	}
	// The client sends nothing more.
	_, err = wr.Read(buf)
	if re := readRefusal(err, budget); re == nil || re.status != 408 {
		t.Fatalf("a body that stopped arriving: %v, want a timeout answered 408", err)
	}
}
