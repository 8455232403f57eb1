// Package ratelog writes log lines about events that can come in floods
// (rejected records, failed authentications, retries) at a bounded rate.
//
// Lines are keyed by their event kind, a fixed string chosen by the caller
// ("auth_failure", "store_retry"): each kind may log Burst lines per
// Interval, and the lines past that are counted instead. The next line of
// that kind to be written carries the count as "suppressed", so that nothing
// is dropped without a trace. Kinds are independent: a flood of one does not
// silence another. This is the sampling the OpenTelemetry Collector applies
// to its own logs (a first few lines per period, then a count), kept per kind.
//
// A Logger never logs payloads: callers pass ids, counts and reasons only.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Config sets the rate of each kind.
type Config struct {
	// Interval is the period over which Burst applies. Default 1m.
	Interval time.Duration
	// Burst is how many lines of one kind are written per Interval. Default 10.
	Burst int
}

// NewDefaultConfig returns the defaults: 10 lines of each kind a minute.
func NewDefaultConfig() Config { return Config{Interval: time.Minute, Burst: 10} }

// Logger rate-limits lines per kind. It is safe for concurrent use. A nil
// *Logger discards every line.
type Logger struct {
	log *slog.Logger
	cfg Config
	now func() time.Time

	mu    sync.Mutex
	kinds map[string]*window
}

// window is the state of one kind in its current interval.
type window struct {
	start      time.Time
	written    int
	suppressed int64
}

// New returns a Logger writing to log; zero fields of cfg take the defaults.
func New(log *slog.Logger, cfg Config) *Logger {
	d := NewDefaultConfig()
	if cfg.Interval <= 0 {
		cfg.Interval = d.Interval
	}
	if cfg.Burst <= 0 {
		cfg.Burst = d.Burst
	}
	if log == nil {
		log = slog.Default()
	}
	return &Logger{log: log, cfg: cfg, now: time.Now, kinds: map[string]*window{}}
}

// Log writes msg at level with the attributes args (slog key-value pairs)
// and "kind", unless kind has used up its lines for the interval; then it
// only counts it. It reports whether the line was written.
func (l *Logger) Log(ctx context.Context, level slog.Level, kind, msg string, args ...any) bool {
	return l.LogFunc(ctx, level, kind, msg, func() []any { return args })
}

// LogFunc is Log with the attributes returned by args, which is called
// only for a line that is written: a caller whose attributes cost to make
// (a message cleaned of payloads) pays for the lines written, not for
// every event of a flood.
func (l *Logger) LogFunc(ctx context.Context, level slog.Level, kind, msg string, args func() []any) bool {
	if l == nil || !l.log.Enabled(ctx, level) {
		return false
	}
	now := l.now()
	l.mu.Lock()
	w := l.kinds[kind]
	if w == nil {
		w = &window{start: now}
		l.kinds[kind] = w
	}
	if now.Sub(w.start) >= l.cfg.Interval {
		w.start, w.written = now, 0
	}
	if w.written >= l.cfg.Burst {
		w.suppressed++
		l.mu.Unlock()
		return false
	}
	w.written++
	suppressed := w.suppressed
	w.suppressed = 0
	l.mu.Unlock()

	a := args()
	attrs := make([]any, 0, len(a)+4)
	attrs = append(attrs, "kind", kind)
	attrs = append(attrs, a...)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	l.log.Log(ctx, level, msg, attrs...)
	return true
}

// Warn logs at warning level; see Log.
func (l *Logger) Warn(kind, msg string, args ...any) bool {
	return l.Log(context.Background(), slog.LevelWarn, kind, msg, args...)
}

// WarnFunc logs at warning level; see LogFunc.
func (l *Logger) WarnFunc(kind, msg string, args func() []any) bool {
	return l.LogFunc(context.Background(), slog.LevelWarn, kind, msg, args)
}

// Info logs at info level; see Log.
func (l *Logger) Info(kind, msg string, args ...any) bool {
	return l.Log(context.Background(), slog.LevelInfo, kind, msg, args...)
}

// Debug logs at debug level; see Log.
func (l *Logger) Debug(kind, msg string, args ...any) bool {
	return l.Log(context.Background(), slog.LevelDebug, kind, msg, args...)
}

// Flush writes, for every kind with lines counted but not yet reported, one
// line saying how many were suppressed. Call it at shutdown.
func (l *Logger) Flush() {
	if l == nil {
		return
	}
	l.mu.Lock()
	type pending struct {
		kind string
		n    int64
	}
	var out []pending
	for k, w := range l.kinds {
		if w.suppressed > 0 {
			out = append(out, pending{k, w.suppressed})
			w.suppressed = 0
		}
	}
	l.mu.Unlock()
	for _, p := range out {
		l.log.Warn("log lines suppressed by the rate limit", "kind", p.kind, "suppressed", p.n)
	}
}
