// Command parse is the yardstick of the analyze benchmark: it reads a file
// of NDJSON lines and parses each with fastjson, nothing more, and prints
// how many lines it parsed.
//
//	go run ./bench/analyze/parse capture.ndjson
package main

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/valyala/fastjson"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: parse FILE")
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	r := bufio.NewReaderSize(f, 1<<16)
	var p fastjson.Parser
	n, bad := 0, 0
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 1 {
			if _, perr := p.ParseBytes(line); perr != nil {
				bad++
			} else {
				n++
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("%d lines parsed, %d not JSON\n", n, bad)
}
