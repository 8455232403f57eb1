package capture

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/dialect"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	"github.com/mcpaudit/mcpaudit/internal/procstat"
	"github.com/valyala/fastjson"
)

// BenchmarkDecode reads a generated mixed capture as analyze does (each
// call parsed once, read by its dialect, payloads not copied), beside a
// bare fastjson parse of the same lines, the yardstick of docs/benchmarks.md:
//
//	GOMAXPROCS=1 go test ./collector/capture -run '^$' -bench Decode -benchmem
func BenchmarkDecode(b *testing.B) {
	c := capgen.Generate(capgen.Config{Seed: 7, Sessions: 20_000, Span: 2 * time.Hour, AnomalyRate: 0.1, NoiseRate: 0.002})
	data := bytes.Join(c.Lines, []byte("\n"))
	var otlpDoc bytes.Buffer
	if err := capgen.WriteOTLP(&otlpDoc, c.Lines, 3); err != nil {
		b.Fatal(err)
	}
	b.Run("fastjson", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		var p fastjson.Parser
		cpu0 := procstat.CPU()
		for range b.N {
			for rest := data; len(rest) > 0; {
				line := rest
				if i := bytes.IndexByte(rest, '\n'); i >= 0 {
					line, rest = rest[:i], rest[i+1:]
				} else {
					rest = nil
				}
				p.ParseBytes(line)
			}
		}
		b.ReportMetric(float64(c.Calls)*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		b.ReportMetric(float64(c.Calls)*float64(b.N)/(procstat.CPU()-cpu0).Seconds(), "calls/cpu-s")
	})
	for _, in := range []struct {
		name string
		data []byte
	}{{"records", data}, {"otlp", otlpDoc.Bytes()}} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			rd := dialect.NewReader(dialect.Config{})
			cpu0 := procstat.CPU()
			for range b.N {
				d, err := NewDecoder(bytes.NewReader(in.data), "bench")
				if err != nil {
					b.Fatal(err)
				}
				d.DropPayloads()
				for {
					_, err := d.NextRecord(rd)
					if err == io.EOF {
						break
					}
				}
			}
			b.ReportMetric(float64(c.Calls)*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			b.ReportMetric(float64(c.Calls)*float64(b.N)/(procstat.CPU()-cpu0).Seconds(), "calls/cpu-s")
		})
	}
}
