// Command gen writes a generated mixed capture (internal/capgen) for the
// analyze benchmark: NDJSON call records, or the same exchanges as one OTLP
// JSON document whose spans are grouped by resource (a server's pods), each
// group in the order its spans ended, as an exporter sends them.
//
//	go run ./bench/analyze/gen -sessions 98000 -out capture.ndjson
//	go run ./bench/analyze/gen -sessions 200000 -format otlp -out capture.otlp.json
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/mcpaudit/mcpaudit/internal/capgen"
)

func main() {
	sessions := flag.Int("sessions", 98_000, "sessions to generate (about 2.9 calls each)")
	seed := flag.Int64("seed", 1, "generator seed")
	span := flag.Duration("span", 24*time.Hour, "how long sessions keep starting")
	format := flag.String("format", "ndjson", "ndjson (call records) or otlp (one OTLP JSON document)")
	pods := flag.Int("pods", 3, "OTLP: resources (pods) per server; a session stays on one")
	out := flag.String("out", "", "output file (required)")
	flag.Parse()
	if *out == "" {
		log.Fatal("gen: -out is required")
	}
	c := capgen.Generate(capgen.Config{Seed: *seed, Sessions: *sessions, Span: *span, AnomalyRate: 0.1, NoiseRate: 0.002})
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	switch *format {
	case "ndjson":
		for _, l := range c.Lines {
			w.Write(l)
			w.WriteByte('\n')
		}
	case "otlp":
		err = capgen.WriteOTLP(w, c.Lines, *pods)
	default:
		log.Fatalf("gen: unknown format %q", *format)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "%d distinct calls, %d lines, %d expected findings\n", c.Calls, len(c.Lines), len(c.Expected))
}
