package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/mcpaudit/mcpaudit/collector/detect"
)

// markFile is the state file's content: every partition's watermark.
type markFile struct {
	Version    int        `json:"version"`
	Partitions []markLine `json:"partitions"`
}

type markLine struct {
	Tenant    string    `json:"tenant"`
	Server    string    `json:"server"`
	Watermark time.Time `json:"watermark"`
}

// readMarks reads the partitions' watermarks kept by the last run. A
// missing or unreadable file is no marks: the store's watermark then
// stands for every partition, which only means more output is checked
// again at the replay.
func readMarks(path string, log *slog.Logger) map[detect.PartitionKey]time.Time {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot read the partitions' watermarks; using the store's", "path", path, "err", err)
		}
		return nil
	}
	var f markFile
	if err := json.Unmarshal(b, &f); err != nil || f.Version != 1 {
		log.Warn("cannot read the partitions' watermarks; using the store's", "path", path, "err", err)
		return nil
	}
	m := make(map[detect.PartitionKey]time.Time, len(f.Partitions))
	for _, l := range f.Partitions {
		m[detect.PartitionKey{Tenant: l.Tenant, Server: l.Server}] = l.Watermark
	}
	return m
}

// saveMarks writes the partitions' watermarks after a commit, at most once
// a second, atomically (a temporary file renamed over the old one).
func (p *Pipeline) saveMarks(marks map[detect.PartitionKey]time.Time) {
	if p.cfg.StateFile == "" || maps.Equal(marks, p.savedMarks) || p.now().Sub(p.marksSaved) < time.Second {
		return
	}
	if err := writeMarks(p.cfg.StateFile, marks); err != nil {
		p.log.Warn("cannot save the partitions' watermarks", "path", p.cfg.StateFile, "err", err)
		return
	}
	p.savedMarks, p.marksSaved = marks, p.now()
}

func writeMarks(path string, marks map[detect.PartitionKey]time.Time) error {
	f := markFile{Version: 1}
	for k, t := range marks {
		f.Partitions = append(f.Partitions, markLine{Tenant: k.Tenant, Server: k.Server, Watermark: t})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".partitions-*")
	if err != nil {
		return fmt.Errorf("cannot create the state file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// debugMemoryLimit returns the runtime's memory limit (GOMEMLIMIT or
// debug.SetMemoryLimit), math.MaxInt64 when none is set.
func debugMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }
