package clickhouse

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

// The schema is a series of migrations, schema/NNNN_name.sql, applied in
// order and recorded in schema_migrations. A migration is never edited once
// released: a change is a new file. Each statement must be safe to run again
// (IF NOT EXISTS), since a start that fails halfway re-runs the migration.
//
//go:embed schema/*.sql
var schemaFS embed.FS

// migration is one schema file.
type migration struct {
	Version int
	Name    string
	text    string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

func migrations() ([]migration, error) {
	names, err := fs.Glob(schemaFS, "schema/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		m := migrationName.FindStringSubmatch(path.Base(n))
		if m == nil {
			return nil, fmt.Errorf("schema file %s is not named NNNN_name.sql", n)
		}
		v, _ := strconv.Atoi(m[1])
		text, err := schemaFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{Version: v, Name: m[2], text: string(text)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("schema migrations must be numbered 1, 2, 3...: found %04d at position %d", out[i].Version, i+1)
		}
	}
	return out, nil
}

// layout is where the tables are and which clauses the DDL gets: it turns
// the schema templates into statements for one server and configuration.
type layout struct {
	DB      string
	Cluster string
	Caps    capabilities
}

// table returns the name queries and inserts use: in cluster mode the
// Distributed table.
func (l layout) table(name string) string { return l.DB + "." + name }

// local returns the name of the table that holds the rows: in cluster mode
// the Replicated table on each node, which DDL, TTL and deletes address.
func (l layout) local(name string) string {
	if l.Cluster != "" {
		return l.DB + "." + name + "_local"
	}
	return l.DB + "." + name
}

func (l layout) onCluster() string {
	if l.Cluster == "" {
		return ""
	}
	return " ON CLUSTER " + l.Cluster
}

func (l layout) funcs() template.FuncMap {
	return template.FuncMap{
		"table":     l.local,
		"meta":      func(name string) string { return l.DB + "." + name },
		"oncluster": l.onCluster,
		"codec": func(spec string) string {
			if !l.Caps.Codecs {
				return ""
			}
			return " CODEC(" + spec + ")"
		},
		"engine": func(name, ver string) string {
			args := ver
			if l.Cluster != "" {
				args = fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s_local', '{replica}'", l.DB, name)
				if ver != "" {
					args += ", " + ver
				}
				return "ReplicatedReplacingMergeTree(" + args + ")"
			}
			return "ReplacingMergeTree(" + args + ")"
		},
		// metaengine keeps small tables that every node holds whole: in
		// cluster mode one replication path for the whole cluster.
		"metaengine": func(name, ver string) string {
			if l.Cluster != "" {
				return fmt.Sprintf("ReplicatedReplacingMergeTree('/clickhouse/tables/all/%s/%s', '{replica}', %s)", l.DB, name, ver)
			}
			return "ReplacingMergeTree(" + ver + ")"
		},
		"settings": func() string {
			s := "SETTINGS index_granularity = 8192"
			if l.Caps.DedupToken && l.Cluster == "" {
				// A token deduplicates only within this window of recent
				// inserts; Replicated tables have one by default.
				s += ", non_replicated_deduplication_window = 1000"
			}
			return s
		},
		"distributed": func(name, shardKey string) string {
			if l.Cluster == "" {
				return ""
			}
			return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s ON CLUSTER %s AS %s\nENGINE = Distributed(%s, %s, %s_local, %s);",
				l.table(name), l.Cluster, l.local(name), l.Cluster, l.DB, name, shardKey)
		},
	}
}

// addsColumn reports whether a statement is an ALTER TABLE ... ADD COLUMN,
// which not every server can make idempotent with IF NOT EXISTS.
func addsColumn(q string) bool {
	code := strings.ToUpper(stripComments(q))
	return strings.HasPrefix(strings.TrimSpace(code), "ALTER TABLE") && strings.Contains(code, " ADD COLUMN ")
}

// columnExists reports whether ClickHouse refused a column because the
// table has it already (DUPLICATE_COLUMN, ILLEGAL_COLUMN).
func columnExists(err error) bool {
	var ex *proto.Exception
	return errors.As(err, &ex) && (ex.Code == 15 || ex.Code == 44)
}

// statements renders one migration into the statements to run, in order.
func (l layout) statements(m migration) ([]string, error) {
	tpl, err := template.New(m.Name).Funcs(l.funcs()).Parse(m.text)
	if err != nil {
		return nil, fmt.Errorf("cannot parse schema migration %04d: %w", m.Version, err)
	}
	var b strings.Builder
	if err := tpl.Execute(&b, l); err != nil {
		return nil, fmt.Errorf("cannot render schema migration %04d: %w", m.Version, err)
	}
	return splitStatements(b.String()), nil
}

// splitStatements splits SQL at semicolons that end a line, dropping
// comment-only pieces. The schema files put no semicolon at a line end
// inside a string.
func splitStatements(sql string) []string {
	var out []string
	for _, part := range regexp.MustCompile(`;[ \t]*(\n|$)`).Split(sql, -1) {
		if code := stripComments(part); strings.TrimSpace(code) == "" {
			continue
		}
		out = append(out, strings.TrimSpace(part))
	}
	return out
}

func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// bootstrap returns the statements that come before any migration: the
// database and the table recording the migrations.
func (l layout) bootstrap() []string {
	engine := "ReplacingMergeTree"
	if l.Cluster != "" {
		engine = fmt.Sprintf("ReplicatedReplacingMergeTree('/clickhouse/tables/all/%s/schema_migrations', '{replica}')", l.DB)
	}
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + l.DB + l.onCluster(),
		"CREATE TABLE IF NOT EXISTS " + l.DB + ".schema_migrations" + l.onCluster() +
			"\n(\n    version    UInt32,\n    name       String,\n    applied_at DateTime\n)\nENGINE = " + engine + "\nORDER BY version",
	}
}

// ddl renders the whole schema, for the golden files and the docs.
func (l layout) ddl(r Retention) (string, error) {
	ms, err := migrations()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(fmt.Sprintf("-- mcpaudit ClickHouse schema for server %s", l.Caps.Version))
	if l.Cluster != "" {
		b.WriteString(", cluster " + l.Cluster)
	}
	b.WriteString(". Generated by exporter/clickhouse (go test -run TestSchemaGolden -update).\n")
	for _, f := range l.Caps.fallbacks() {
		b.WriteString("-- fallback: " + f + "\n")
	}
	for _, s := range l.bootstrap() {
		b.WriteString("\n" + s + ";\n")
	}
	for _, m := range ms {
		stmts, err := l.statements(m)
		if err != nil {
			return "", err
		}
		b.WriteString(fmt.Sprintf("\n-- migration %04d_%s\n", m.Version, m.Name))
		for _, s := range stmts {
			b.WriteString("\n" + s + ";\n")
		}
	}
	if l.Caps.TTL {
		if stmts := l.ttlStatements(r); len(stmts) > 0 {
			b.WriteString("\n-- retention (from the retention options; rewritten when they change)\n")
			for _, s := range stmts {
				b.WriteString("\n" + s + ";\n")
			}
		}
	}
	return b.String(), nil
}

// migrate creates the database and applies every migration not yet
// recorded. It is safe to run from several replicas at once: every
// statement is idempotent and a migration recorded twice collapses.
func (s *Store) migrate(ctx context.Context) error {
	for _, q := range s.layout.bootstrap() {
		if err := s.conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("cannot create schema: %w", err)
		}
	}
	applied := map[int]bool{}
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT version FROM "+s.layout.DB+".schema_migrations")
	if err != nil {
		return fmt.Errorf("cannot read schema_migrations: %w", err)
	}
	for rows.Next() {
		var v uint32
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("cannot read schema_migrations: %w", err)
		}
		applied[int(v)] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("cannot read schema_migrations: %w", err)
	}
	ms, err := migrations()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		stmts, err := s.layout.statements(m)
		if err != nil {
			return err
		}
		for _, q := range stmts {
			if err := s.conn.Exec(ctx, q); err != nil {
				if addsColumn(q) && columnExists(err) {
					continue // applied by a start that failed later
				}
				return fmt.Errorf("cannot apply schema migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		if m.Version == chainMigration {
			// The history stored before the chain is chained as it is now.
			if err := s.adoptHistory(ctx); err != nil {
				return fmt.Errorf("cannot apply schema migration %04d_%s: %w", m.Version, m.Name, err)
			}
		}
		b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.layout.DB+".schema_migrations (version, name, applied_at)")
		if err != nil {
			return fmt.Errorf("cannot record schema migration %04d: %w", m.Version, err)
		}
		if err := b.Append(uint32(m.Version), m.Name, time.Now()); err != nil {
			return fmt.Errorf("cannot record schema migration %04d: %w", m.Version, err)
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("cannot record schema migration %04d: %w", m.Version, err)
		}
		s.log.Info("clickhouse: applied schema migration", "version", m.Version, "name", m.Name, "database", s.layout.DB)
	}
	return nil
}
