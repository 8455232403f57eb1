package main

import (
	"io"
	"log/slog"
)

// newJSONLogger returns the JSON logger of serve, proxy and wrap: one
// object a line at level and above, durations written as Go writes them
// ("1.2s", "350ms") rather than as the nanoseconds slog's JSON gives.
func newJSONLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}))
}

// durationText writes a duration attribute as text.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
