package sqlite

import (
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/mcpaudit/mcpaudit/exporter/storetest"
)

// BenchmarkBlockCompression measures what compressing calls in blocks
// (docs/storage.md, "Not built yet") would store per call, against the
// store's record-by-record S2 with its dictionary: the encoded records of
// normal and of problem traffic, compressed in blocks of 16 to 512 records
// with zstd (alone, and with the dictionary as a raw prefix) and with S2
// and the dictionary, and each alone with zstd and the dictionary (its CPU
// too). It stores nothing.
//
//	go test -run '^$' -bench BlockCompression -benchtime 1x ./exporter/sqlite/
func BenchmarkBlockCompression(b *testing.B) {
	const n = 30000
	for _, mix := range []struct {
		name     string
		captures []string
	}{{"normal", normalTraffic}, {"problems", problemTraffic}} {
		g, err := storetest.NewGenerator(7, storetest.T0, mix.captures...)
		if err != nil {
			b.Fatal(err)
		}
		recs := g.Records(n)
		encs := make([][]byte, n)
		for i := range recs {
			encs[i] = appendRecord(nil, &recs[i])
		}
		b.Run(mix.name+"/record-s2-dict", func(b *testing.B) {
			var size int
			for range b.N {
				size = 0
				var dst, tmp []byte
				for _, e := range encs {
					dst, tmp = appendCompressed(dst[:0], tmp, e)
					size += len(dst)
				}
			}
			b.ReportMetric(float64(size)/n, "B/call")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/call")
		})
		b.Run(mix.name+"/record-zstd-dict", func(b *testing.B) {
			z, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderDictRaw(1, dictV2),
				zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
			if err != nil {
				b.Fatal(err)
			}
			var size int
			var dst []byte
			for range b.N {
				size = 0
				for _, e := range encs {
					dst = z.EncodeAll(e, dst[:0])
					size += len(dst)
				}
			}
			b.ReportMetric(float64(size)/n, "B/call")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*n), "µs/call")
		})
		for _, block := range []int{16, 64, 512} {
			b.Run(mix.name+"/block"+strconv.Itoa(block), func(b *testing.B) {
				plain, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
				if err != nil {
					b.Fatal(err)
				}
				dict, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderDictRaw(1, dictV2))
				if err != nil {
					b.Fatal(err)
				}
				var zs, zd, s2 int
				var blk, out []byte
				for range b.N {
					zs, zd, s2 = 0, 0, 0
					for i := 0; i < n; i += block {
						blk = blk[:0]
						for _, e := range encs[i:min(i+block, n)] {
							blk = append(blk, e...)
						}
						out = plain.EncodeAll(blk, out[:0])
						zs += len(out)
						out = dict.EncodeAll(blk, out[:0])
						zd += len(out)
						s2 += len(s2Dict.Encode(nil, blk))
					}
				}
				b.ReportMetric(float64(zs)/n, "zstd-B/call")
				b.ReportMetric(float64(zd)/n, "zstd-dict-B/call")
				b.ReportMetric(float64(s2)/n, "s2-dict-B/call")
			})
		}
	}
}
