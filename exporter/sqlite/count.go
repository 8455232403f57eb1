package sqlite

import (
	"context"
	"fmt"
)

// Count returns how many calls and findings the store at path holds,
// reading the file only (a store of any schema version this package
// knows; a call log not applied yet is not counted). serve uses it to say,
// when it starts on another store, what history it leaves in the
// embedded store (op23's D3).
func Count(ctx context.Context, path string) (calls, findings int64, err error) {
	db, err := openReadOnly(path)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM findings)`).Scan(&calls, &findings); err != nil {
		return 0, 0, fmt.Errorf("cannot count the calls and findings of %s: %w", path, err)
	}
	return calls, findings, nil
}
