package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/receiver"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/internal/capgen"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// loadgenCommand drives a running mcpaudit serve with a generated mixed
// capture posted as call records, and reports what it sustained.
func loadgenCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mcpaudit loadgen [flags]\n\nPosts a generated mixed capture to a running mcpaudit serve and reports calls/s, acknowledgement latency and, from its /metrics, ingest-to-finding latency and memory.\n\nflags:")
		fs.PrintDefaults()
	}
	target := fs.String("target", "http://127.0.0.1:4318", "ingest URL of the server")
	apiURL := fs.String("api", "http://127.0.0.1:9464", "API URL of the server (for /metrics); empty to skip")
	rate := fs.Int("rate", 0, "calls per second to offer; 0 for as fast as the server acknowledges")
	duration := fs.Duration("duration", 20*time.Second, "how long to send")
	clients := fs.Int("clients", 8, "concurrent HTTP clients")
	batch := fs.Int("batch", 200, "calls per request")
	calls := fs.Int("calls", 1_000_000, "calls to generate (sent once; sending stops when they run out)")
	seed := fs.Int64("seed", 1, "generator seed")
	live := fs.Bool("live", true, "give calls event times of now, as live traffic has")
	dataDir := fs.String("data-dir", "", "the server's data dir, to report bytes per stored call")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &exitError{code: 2}
	}
	if *clients <= 0 || *batch <= 0 || *calls <= 0 || *rate < 0 {
		return &exitError{code: 2, err: errors.New("loadgen: --clients, --batch and --calls must be positive, --rate not negative")}
	}
	sessions := *calls * 10 / 27 // the generator makes about 2.7 calls a session
	span := time.Hour
	start := time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)
	if *live {
		span = *duration
		if *rate > 0 {
			if d := time.Duration(float64(*calls) / float64(*rate) * float64(time.Second)); d < span {
				span = d
			}
		}
		start = time.Now()
	}
	fmt.Fprintf(stderr, "generating %d calls...\n", *calls)
	c := capgen.Generate(capgen.Config{Seed: *seed, Sessions: sessions, Start: start, Span: span, AnomalyRate: 0.1, NoiseRate: 0.001})
	var batches [][]byte
	for i := 0; i < len(c.Lines); i += *batch {
		batches = append(batches, bytes.Join(c.Lines[i:min(i+*batch, len(c.Lines))], []byte("\n")))
	}
	c.Lines = nil
	before := scrape(*apiURL)

	var (
		next     atomic.Int64
		accepted atomic.Int64
		refused  atomic.Int64
		failed   atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
	)
	deadline := time.Now().Add(*duration)
	var pace <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Duration(float64(*batch) / float64(*rate) * float64(time.Second)))
		defer t.Stop()
		pace = t.C
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *clients}}
	begin := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *clients; w++ {
		wg.Add(1)
		// Each client is a poster of its own: a source whose calls come in
		// time order, as an exporter's do.
		source := fmt.Sprintf("loadgen-%d", w)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if pace != nil {
					select {
					case <-pace:
					case <-ctx.Done():
						return
					}
				}
				i := next.Add(1) - 1
				if int(i) >= len(batches) {
					return
				}
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, "POST", *target+"/v1/calls", bytes.NewReader(batches[i]))
				req.Header.Set("Content-Type", "application/x-ndjson")
				req.Header.Set(receiver.SourceHeader, source)
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t0))
				switch resp.StatusCode {
				case http.StatusOK:
					var n int64
					fmt.Sscanf(string(body), `{"accepted":%d`, &n)
					accepted.Add(n)
				case http.StatusTooManyRequests, http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	after := scrape(*apiURL)

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(math.Ceil(p*float64(len(lat))))-1)]
	}
	fmt.Fprintf(stdout, "sent %d requests of up to %d calls with %d clients in %.1fs\n", len(lat), *batch, *clients, elapsed.Seconds())
	fmt.Fprintf(stdout, "accepted calls: %d  (%.0f calls/s, acknowledged after commit)\n", accepted.Load(), float64(accepted.Load())/elapsed.Seconds())
	fmt.Fprintf(stdout, "refused requests (429/503): %d  failed requests: %d\n", refused.Load(), failed.Load())
	fmt.Fprintf(stdout, "acknowledgement latency per request: p50 %s  p99 %s  max %s\n", q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond))
	if before != nil && after != nil {
		if p50, p99, n := histQuantiles(before, after, metrics.FindingLatencySeconds); n > 0 {
			fmt.Fprintf(stdout, "ingest to finding (server histogram, %d findings): p50 <= %s  p99 <= %s\n", n, p50, p99)
		}
		if p50, p99, n := histQuantiles(before, after, metrics.StoreCommitSeconds); n > 0 {
			fmt.Fprintf(stdout, "store commit (%d commits): p50 <= %s  p99 <= %s\n", n, p50, p99)
		}
		if rss := gauge(after, "process_resident_memory_bytes"); rss > 0 {
			fmt.Fprintf(stdout, "server RSS: %.1f MiB\n", rss/(1<<20))
		}
	}
	if *dataDir != "" && accepted.Load() > 0 {
		var size int64
		files, _ := filepath.Glob(filepath.Join(*dataDir, "mcpaudit.db*"))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				size += fi.Size()
			}
		}
		fmt.Fprintf(stdout, "store on disk: %.1f MiB, %.0f bytes per accepted call (all calls in the store / this run's)\n", float64(size)/(1<<20), float64(size)/float64(accepted.Load()))
	}
	return nil
}

// scrape reads a server's /metrics; nil when it cannot.
func scrape(api string) map[string]*dto.MetricFamily {
	if api == "" {
		return nil
	}
	resp, err := http.Get(strings.TrimRight(api, "/") + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	return mfs
}

func gauge(mfs map[string]*dto.MetricFamily, name string) float64 {
	mf := mfs[name]
	if mf == nil || len(mf.Metric) == 0 || mf.Metric[0].Gauge == nil {
		return 0
	}
	return mf.Metric[0].Gauge.GetValue()
}

// histQuantiles estimates the p50 and p99 of what a histogram observed
// between two scrapes, as the upper bound of the bucket holding them.
func histQuantiles(before, after map[string]*dto.MetricFamily, name string) (p50, p99 string, n uint64) {
	get := func(mfs map[string]*dto.MetricFamily) *dto.Histogram {
		if mf := mfs[name]; mf != nil && len(mf.Metric) > 0 {
			return mf.Metric[0].Histogram
		}
		return nil
	}
	a, b := get(after), get(before)
	if a == nil {
		return "", "", 0
	}
	counts := make([]uint64, len(a.Bucket))
	for i, bk := range a.Bucket {
		counts[i] = bk.GetCumulativeCount()
		if b != nil && i < len(b.Bucket) {
			counts[i] -= b.Bucket[i].GetCumulativeCount()
		}
	}
	n = a.GetSampleCount()
	if b != nil {
		n -= b.GetSampleCount()
	}
	if n == 0 {
		return "", "", 0
	}
	at := func(p float64) string {
		want := uint64(math.Ceil(p * float64(n)))
		for i, c := range counts {
			if c >= want {
				return (time.Duration(a.Bucket[i].GetUpperBound() * float64(time.Second))).String()
			}
		}
		return "+Inf"
	}
	return at(0.5), at(0.99), n
}
