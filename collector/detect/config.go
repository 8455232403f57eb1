package detect

import (
	"errors"
	"time"
)

// Config sets the detector's windows and the live service's event-time
// rules. All windows are event time; IdleTimeout is wall time.
type Config struct {
	// VerifyWindow is how long an uncertain or unconfirmed write may stay
	// pending before it is unverified. Default 5m.
	VerifyWindow time.Duration `yaml:"verify_window"`
	// CorrelationWindow is how far apart two calls may be and still be
	// compared (double applies, duplicate creates, retries). Default 1h.
	CorrelationWindow time.Duration `yaml:"correlation_window"`
	// Lateness is how far out of time order one source may deliver its
	// calls and still have them placed in order: a partition's watermark
	// stays this far behind its sources. Calls later than that are judged
	// as late calls. Default 1s.
	Lateness time.Duration `yaml:"lateness"`
	// AllowedLateness is how far behind its partition's watermark a late
	// call may arrive and still be judged against the state still open;
	// a later one is stored and counted, not judged. Default 2m.
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
	// IdleTimeout is how long (wall time) a source may send nothing before
	// it stops holding its partition's watermark back. Keep it above the
	// exporters' flush interval. Default 10s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// JoinWait is how long (wall time) a new partition waits for its other
	// sources before it takes a watermark, at most idle_timeout: exporters
	// started together first deliver when their flush interval first fires
	// (the OpenTelemetry SDK's every 5 s), seconds apart, and a pod whose
	// clock is slow by more than allowed_lateness that joins after the
	// partition took a watermark has its calls counted too late. A new
	// server's first findings come this much later, and its calls of that
	// time wait in memory. Default 10s.
	JoinWait time.Duration `yaml:"join_wait"`
	// MaxClockSkew is how far ahead of the collector's wall clock a source
	// may run: a partition's watermark never passes the wall clock by more,
	// and calls dated beyond it are counted as ahead. Default 1m.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// MaxClockLag is how far behind the wall clock a source's calls may be
	// dated, from its first, and the source still hold its partition's
	// watermark back beside another source of it that is current: one
	// further behind (a clock hours slow) would hold every finding of its
	// server for as long as it runs. Its calls are then too late, counted
	// and named as those of a source that joins that far behind. A source
	// once current (a pod whose exporter falls behind, a sender replaying
	// its backlog after a restart) is not subject to it. It also bounds how
	// long a quiet source whose clock is slow (current, with a lag of at
	// most this much) goes on holding its partition at that lag: until it
	// has been quiet this long while other sources of it delivered. 0
	// turns both off. Default 15m.
	MaxClockLag time.Duration `yaml:"max_clock_lag"`
	// MaxSources caps the sources (exporters, posters) one partition keeps
	// with their clocks. A new source of a full partition takes the place
	// of the one quiet (idle_timeout) the longest; when none is quiet, its
	// calls are taken, stored and judged under the partition's overflow
	// source, whose clock follows the latest of them, and counted
	// (overflow_calls). Each call and each tick goes over the partition's
	// sources, so a sender naming a new source per request would otherwise
	// cost every later call more. Keep it above the pods a server runs at
	// once. Default 1000.
	MaxSources int `yaml:"max_sources"`

	// keepLeases keeps every apply and receipt of a copy key and judges
	// them all again after a late one, as fx19d did (no foldLeases, no
	// leaseSpan): for a test to compare the findings.
	keepLeases bool
}

// NewDefaultConfig returns the documented defaults.
func NewDefaultConfig() Config {
	return Config{
		VerifyWindow:      5 * time.Minute,
		CorrelationWindow: time.Hour,
		Lateness:          time.Second,
		AllowedLateness:   2 * time.Minute,
		IdleTimeout:       10 * time.Second,
		JoinWait:          10 * time.Second,
		MaxClockSkew:      time.Minute,
		MaxClockLag:       15 * time.Minute,
		MaxSources:        1000,
	}
}

// Validate checks that every window is usable.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, errors.New(name+": must be positive"))
		}
	}
	positive("verify_window", c.VerifyWindow)
	positive("correlation_window", c.CorrelationWindow)
	positive("idle_timeout", c.IdleTimeout)
	positive("max_clock_skew", c.MaxClockSkew)
	if c.Lateness < 0 {
		errs = append(errs, errors.New("lateness: must not be negative"))
	}
	if c.MaxClockLag < 0 {
		errs = append(errs, errors.New("max_clock_lag: must not be negative"))
	}
	if c.AllowedLateness < 0 {
		errs = append(errs, errors.New("allowed_lateness: must not be negative"))
	}
	if c.JoinWait < 0 {
		errs = append(errs, errors.New("join_wait: must not be negative"))
	}
	if c.MaxSources < 1 {
		errs = append(errs, errors.New("max_sources: must be at least 1"))
	}
	return errors.Join(errs...)
}

// horizon is how long correlation state is kept after its last use: the
// correlation window, plus the allowance within which a late call may
// still correlate with it.
func (c *Config) horizon() time.Duration { return c.CorrelationWindow + c.AllowedLateness }
