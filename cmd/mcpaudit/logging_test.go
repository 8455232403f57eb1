package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestJSONLogger_Durations: a duration in a log line reads as a duration,
// in a group too, and other values keep their JSON types.
func TestJSONLogger_Durations(t *testing.T) {
	var b bytes.Buffer
	newJSONLogger(&b, slog.LevelInfo).Info("rebuilt", "took", 1200*time.Millisecond, "calls", 3,
		slog.Group("retry", "wait", 350*time.Millisecond))
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if line["took"] != "1.2s" || line["calls"] != 3.0 {
		t.Errorf("took %v (%T), calls %v; want \"1.2s\" and 3: %s", line["took"], line["took"], line["calls"], b.String())
	}
	if g, _ := line["retry"].(map[string]any); g == nil || g["wait"] != "350ms" {
		t.Errorf("retry.wait = %v; want \"350ms\": %s", line["retry"], b.String())
	}
}
