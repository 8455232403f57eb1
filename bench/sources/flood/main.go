// Command flood posts one-call /v1/calls requests to a running mcpaudit
// serve: in -mode sources each request under its own Mcpaudit-Source (a
// sender naming a new source per request), in -mode one all from one
// poster, one after the other, for -dur. It prints how many were
// acknowledged and how fast (docs/benchmarks.md, "A source per request").
//
//	go run ./bench/sources/flood -addr 127.0.0.1:26318 -mode sources -n 30000 -workers 8
//	go run ./bench/sources/flood -addr 127.0.0.1:26318 -mode one -dur 20s
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var seq atomic.Int64

func body(prefix string) []byte {
	i := seq.Add(1)
	at := time.Now().UTC().Add(-50 * time.Millisecond)
	return fmt.Appendf(nil, `{"time":%q,"server":"thegram","session":"%s-s%d","request":{"id":%d,"jsonrpc":"2.0","method":"tools/call","params":{"name":"gram_read","arguments":{"path":"d/%d.gram"}}},"response":{"id":%d,"jsonrpc":"2.0","result":{"isError":false,"structuredContent":{"path":"d/%d.gram","rev":4,"hash":"bb"}}}}`+"\n",
		at.Format(time.RFC3339Nano), prefix, i, i, i%100, i, i%100)
}

func post(c *http.Client, addr, source string, b []byte) error {
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/calls", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Mcpaudit-Source", source)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:26318", "ingest address")
	mode := flag.String("mode", "sources", "sources: -n requests each its own source; one: one poster for -dur")
	n := flag.Int("n", 30000, "requests (sources mode)")
	workers := flag.Int("workers", 8, "concurrent posters (sources mode)")
	dur := flag.Duration("dur", 20*time.Second, "how long (one mode)")
	tag := flag.String("tag", fmt.Sprint(time.Now().UnixNano()), "source name prefix")
	flag.Parse()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	start := time.Now()
	var ok, failed atomic.Int64
	switch *mode {
	case "sources":
		var next atomic.Int64
		var wg sync.WaitGroup
		for range *workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(*n) {
						return
					}
					if err := post(c, *addr, fmt.Sprintf("%s-src-%d", *tag, i), body(*tag)); err != nil {
						failed.Add(1)
					} else {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	case "one":
		for time.Since(start) < *dur {
			if err := post(c, *addr, *tag+"-one", body(*tag)); err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		}
	}
	el := time.Since(start)
	fmt.Printf("mode=%s acknowledged=%d failed=%d took=%.1fs rate=%.0f/s\n", *mode, ok.Load(), failed.Load(), el.Seconds(), float64(ok.Load())/el.Seconds())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
