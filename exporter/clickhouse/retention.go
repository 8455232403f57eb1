package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// retainedTables are the tables retention and DeleteBefore apply to; the
// watermarks are kept. too_late goes with the calls it names (by time and
// tenant); DeleteBefore does not count its rows. finding_changes go by
// their own time, which is when a person changed the finding, after it was
// detected: a change goes at or after its finding, never before (review
// rev19c's D2: they were kept for good, their entries cut past, so that
// they stayed unchecked); DeleteBefore does not count them either.
var retainedTables = []string{"calls", "writes", "findings", "too_late", "finding_changes"}

// unpartitioned are the retained tables without day partitions (small):
// the fallback deletes their old rows rather than dropping partitions.
var unpartitioned = map[string]bool{"finding_changes": true}

// uncounted are the retained tables whose rows DeleteBefore does not count:
// they are no calls, writes or findings.
var uncounted = map[string]bool{"too_late": true, "finding_changes": true}

// keepSeconds is a retention in whole seconds, rounded up.
func keepSeconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// ttlExpr returns the TTL expression of r: the time a row expires, by its
// tenant. It is empty when every row is kept forever.
func ttlExpr(r Retention) string {
	if r.Default == 0 && len(r.Tenants) == 0 {
		return ""
	}
	expiry := func(d time.Duration) string {
		if d == 0 {
			return "toDateTime(4294967295)" // the last DateTime: never
		}
		return fmt.Sprintf("time + INTERVAL %d SECOND", keepSeconds(d))
	}
	if len(r.Tenants) == 0 {
		return expiry(r.Default)
	}
	var b strings.Builder
	b.WriteString("multiIf(")
	for _, t := range sortedKeys(r.Tenants) {
		fmt.Fprintf(&b, "tenant = %s, %s, ", quote(t), expiry(r.Tenants[t]))
	}
	b.WriteString(expiry(r.Default) + ")")
	return b.String()
}

// ttlStatements returns the ALTERs that set the TTL of every retained table
// to the policy r.
func (l layout) ttlStatements(r Retention) []string {
	expr := ttlExpr(r)
	var out []string
	for _, t := range retainedTables {
		if expr == "" {
			out = append(out, "ALTER TABLE "+l.local(t)+l.onCluster()+" REMOVE TTL")
		} else {
			out = append(out, "ALTER TABLE "+l.local(t)+l.onCluster()+" MODIFY TTL "+expr)
		}
	}
	return out
}

// applyTTL sets the TTL of the retained tables when the policy differs from
// the one recorded in retention_policies.
func (s *Store) applyTTL(ctx context.Context) error {
	expr := ttlExpr(s.opts.Retention)
	recorded := map[string]string{}
	rows, err := s.conn.Query(ctx, "SELECT table_name, argMax(policy, version) FROM "+s.layout.DB+".retention_policies GROUP BY table_name")
	if err != nil {
		return fmt.Errorf("cannot read retention_policies: %w", err)
	}
	for rows.Next() {
		var t, p string
		if err := rows.Scan(&t, &p); err != nil {
			rows.Close()
			return fmt.Errorf("cannot read retention_policies: %w", err)
		}
		recorded[t] = p
	}
	rows.Close()
	stmts := s.layout.ttlStatements(s.opts.Retention)
	for i, t := range retainedTables {
		if p, ok := recorded[t]; p == expr && (ok || expr == "") {
			continue
		}
		if err := s.conn.Exec(ctx, stmts[i]); err != nil {
			return fmt.Errorf("cannot set the TTL of %s: %w", t, err)
		}
		b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+".retention_policies (table_name, policy, applied_at, version)")
		if err == nil {
			now := time.Now()
			if err = b.Append(t, expr, now, uint64(now.UnixNano())); err == nil {
				err = b.Send()
			}
		}
		if err != nil {
			return fmt.Errorf("cannot record the TTL of %s: %w", t, err)
		}
		s.log.Info("clickhouse: set retention TTL", "table", t, "ttl", expr)
	}
	return nil
}

// enforceRetention does the job of TTL on servers without it: it drops the
// day partitions that every tenant's retention has passed, and deletes the
// older rows of tenants that keep less than the longest retention.
func (s *Store) enforceRetention(ctx context.Context, now time.Time) error {
	// What was acknowledged before is in ClickHouse first (Ack "log").
	if err := s.settle(ctx); err != nil {
		return err
	}
	r := s.opts.Retention
	// Group tenants by retention; "" stands for every tenant not listed.
	longest, forever := r.Default, r.Default == 0
	for _, d := range r.Tenants {
		longest = max(longest, d)
	}
	if forever && len(r.Tenants) == 0 {
		return nil
	}
	if err := s.cut(ctx, now); err != nil {
		return err
	}
	listed := sortedKeys(r.Tenants)
	for _, t := range retainedTables {
		drops := !forever && !unpartitioned[t]
		if drops {
			if err := s.dropPartitionsBefore(ctx, t, now.Add(-longest)); err != nil {
				return err
			}
		}
		for _, tenant := range listed {
			d := r.Tenants[tenant]
			if drops && d >= longest {
				continue // the partition drops cover it
			}
			cond := "tenant = " + quote(tenant) + " AND " + timeBefore(now.Add(-d))
			if err := s.deleteWhere(ctx, t, cond); err != nil {
				return err
			}
		}
		if !forever && (r.Default < longest || !drops) {
			cond := timeBefore(now.Add(-r.Default))
			if len(listed) > 0 {
				cond = "tenant NOT IN " + quoteList(listed) + " AND " + cond
			}
			if err := s.deleteWhere(ctx, t, cond); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropPartitionsBefore drops the day partitions of table that end at or
// before t.
func (s *Store) dropPartitionsBefore(ctx context.Context, table string, t time.Time) error {
	day, _ := strconv.ParseUint(t.UTC().Format("20060102"), 10, 32)
	name := s.layout.local(table)
	db, tbl, _ := strings.Cut(name, ".")
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT partition FROM system.parts WHERE active AND database = "+quote(db)+" AND table = "+quote(tbl))
	if err != nil {
		return fmt.Errorf("cannot list partitions of %s: %w", table, err)
	}
	var old []uint64
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return fmt.Errorf("cannot list partitions of %s: %w", table, err)
		}
		if v, err := strconv.ParseUint(p, 10, 32); err == nil && v < day {
			old = append(old, v)
		}
	}
	rows.Close()
	for _, p := range old {
		if err := s.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s%s DROP PARTITION %d", name, s.layout.onCluster(), p)); err != nil {
			return fmt.Errorf("cannot drop partition %d of %s: %w", p, table, err)
		}
		s.log.Info("clickhouse: dropped partition past retention", "table", table, "partition", p)
	}
	return nil
}

// deleteWhere deletes the rows of table matching cond and waits until the
// mutation is done. It does nothing when no row matches.
func (s *Store) deleteWhere(ctx context.Context, table, cond string) error {
	return s.deleteFrom(ctx, table, s.layout.table(table), s.layout.local(table), cond)
}

// deleteFrom deletes the rows of table matching cond, counted in name and
// deleted from local, and waits until the mutation is done.
func (s *Store) deleteFrom(ctx context.Context, table, name, local, cond string) error {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM "+name+" WHERE "+cond).Scan(&n); err != nil {
		return fmt.Errorf("cannot count rows to delete from %s: %w", table, err)
	}
	if n == 0 {
		return nil
	}
	q := "ALTER TABLE " + local + s.layout.onCluster() + " DELETE WHERE " + cond
	if s.caps.MutationsSync {
		return wrapQueryErr("delete from "+table, s.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"mutations_sync": 2})), q))
	}
	if err := s.conn.Exec(ctx, q); err != nil {
		return wrapQueryErr("delete from "+table, err)
	}
	db, tbl, _ := strings.Cut(local, ".")
	for {
		var pending uint64
		err := s.conn.QueryRow(ctx, "SELECT count() FROM system.mutations WHERE NOT is_done AND database = "+quote(db)+" AND table = "+quote(tbl)).Scan(&pending)
		if err != nil {
			return wrapQueryErr("wait for the delete from "+table, err)
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cannot wait for the delete from %s: %w", table, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cut cuts this replica's chains at the retention cutoffs of now, signed,
// before any row is deleted (chain.go).
func (s *Store) cut(ctx context.Context, now time.Time) error {
	s.chainMu.Lock()
	defer s.chainMu.Unlock()
	return s.cutChains(ctx, func(tenant string) time.Time {
		d := s.opts.Retention.retentionOf(tenant)
		if d == 0 {
			return time.Time{}
		}
		return now.Add(-d)
	})
}

// retentionLoop enforces retention on servers without TTL, every
// CheckInterval, until the store closes.
func (s *Store) retentionLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.Retention.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		if !s.connected() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Retention.CheckInterval)
		var err error
		if s.caps.TTL {
			// TTL removes rows in the background: the chains are cut
			// at the cutoffs it applies.
			err = s.cut(ctx, time.Now())
		} else {
			err = s.enforceRetention(ctx, time.Now())
		}
		if err != nil {
			s.log.Warn("clickhouse: cannot enforce retention", "err", err)
		}
		cancel()
	}
}
