package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/collector/pipeline"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
)

// A data dir outlives a switch of serve.store (op23's D3): the embedded
// store's file stays, with its history, and the state file's marks say
// what was committed to the store that wrote them. serve says what history
// the chosen store does not hold, and keeps one state file per store:
// partitions.json is the chosen store's, the others wait beside it under
// their store's name until serve runs on their store again.

// storeID names the store serve writes to, as the state file records it
// (pipeline.Config.Store): "sqlite", or "clickhouse:" and the database.
func storeID(cfg Config) string {
	if cfg.Serve.Store == "clickhouse" {
		return "clickhouse:" + cfg.Serve.ClickHouse.Database
	}
	return cfg.Serve.Store
}

// parkedStateFile is the name the state file of store id has in the data
// dir while serve runs on another store: partitions.sqlite.json,
// partitions.clickhouse-mcpaudit.json.
func parkedStateFile(id string) string {
	return "partitions." + strings.NewReplacer(":", "-", "/", "-", string(filepath.Separator), "-").Replace(id) + ".json"
}

// switchStateFile makes the data dir's state file (partitions.json) the
// one of store id before the pipeline reads it: a file another store
// wrote is moved aside under that store's name, and the chosen store's
// own file, if one was moved aside before, is put back. A file of a
// release before the label (no store in it) is the embedded store's when
// serve starts on another store and the embedded store holds calls
// (embeddedCalls): that is how a data dir comes to hold both; otherwise
// it is the chosen store's, as it always was.
func switchStateFile(dir, id string, embeddedCalls int64, log *slog.Logger) error {
	cur := filepath.Join(dir, stateFile)
	owner, exists, err := pipeline.StateStore(cur)
	if err != nil {
		// Left to the pipeline, which says it and judges every stored
		// call again.
		return nil
	}
	guessed := false
	if exists && owner == "" && id != "sqlite" && embeddedCalls > 0 {
		owner, guessed = "sqlite", true
	}
	if !exists || owner == "" || owner == id {
		return nil
	}
	parked := filepath.Join(dir, parkedStateFile(owner))
	if err := os.Rename(cur, parked); err != nil {
		return fmt.Errorf("cannot move aside the state file of store %s: %w", owner, err)
	}
	// The journal of its counters goes with it (one missing only costs
	// the counters' values: they start at 0, with a warning).
	moveCountLog(dir, stateFile, parkedStateFile(owner))
	own := filepath.Join(dir, parkedStateFile(id))
	back := true
	if err := os.Rename(own, cur); errors.Is(err, fs.ErrNotExist) {
		back = false
	} else if err != nil {
		return fmt.Errorf("cannot put back the state file of store %s: %w", id, err)
	}
	if back {
		moveCountLog(dir, parkedStateFile(id), stateFile)
	}
	args := []any{"store", id, "state_file_of", owner, "moved_to", parked}
	if guessed {
		args = append(args, "why", "written by a release that did not name its store, beside an embedded store that holds calls")
	}
	if back {
		log.Warn("the state file was written for another store: its partitions' marks, downtimes and waiting withdrawals are not carried over, and this store's own state file, kept aside since serve last ran on it, is back", append(args, "restored_from", own)...)
	} else {
		log.Warn("the state file was written for another store: its partitions' marks, downtimes and waiting withdrawals are not carried over (they describe what that store holds); this store starts without a state file", args...)
	}
	return nil
}

// moveCountLog renames the files of the counters' journal of the state
// file named from in dir (pipeline.CountLogNames) to those of the state
// file named to; a file missing is passed over.
func moveCountLog(dir, from, to string) {
	src, dst := pipeline.CountLogNames(from), pipeline.CountLogNames(to)
	for i := range src {
		os.Rename(filepath.Join(dir, src[i]), filepath.Join(dir, dst[i]))
	}
}

// embeddedHistory returns what the embedded store in dir holds when serve
// starts on another store (nil when it runs on the embedded store, or dir
// holds none), and says it in a WARN: serve neither reads nor copies it.
func embeddedHistory(ctx context.Context, cfg Config, log *slog.Logger) *api.OtherStore {
	if cfg.Serve.Store == "sqlite" {
		return nil
	}
	path := filepath.Join(cfg.Serve.DataDir, storeFile)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	calls, findings, err := sqlite.Count(ctx, path)
	if err == nil && calllogs.InUse(cfg.Serve.DataDir) {
		// The calls of a data dir written with serve.sqlite.calls: log (a
		// new data dir's default since stop 52) are in its call logs: the
		// table alone said 0 of them.
		var logged int64
		logged, err = calllogs.Count(cfg.Serve.DataDir)
		calls += logged
	}
	if err != nil {
		log.Warn("the data dir holds an embedded store that serve does not read on this store, and its calls cannot be counted",
			"store", cfg.Serve.Store, "path", path, "err", err)
		return &api.OtherStore{Store: "sqlite", Path: path, Calls: -1, Findings: -1}
	}
	if calls == 0 && findings == 0 {
		return nil
	}
	log.Warn("the data dir holds an embedded store whose history the chosen store does not hold: serve neither reads nor copies it; it stays in the file, read with mcpaudit findings|timeline|calls --data-dir or verify --data-dir (docs/clickhouse.md#switching-from-the-embedded-store)",
		"store", cfg.Serve.Store, "path", path, "calls", calls, "findings", findings)
	return &api.OtherStore{Store: "sqlite", Path: path, Calls: calls, Findings: findings}
}
