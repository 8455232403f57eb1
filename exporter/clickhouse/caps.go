package clickhouse

import (
	"fmt"
	"log/slog"
)

// version is a server version, major.minor.patch.
type version struct{ Major, Minor, Patch uint64 }

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

func (v version) atLeast(major, minor uint64) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// capabilities are the optional server features the store uses. The tables
// and queries are the same everywhere; a feature clause is added only where
// the server has it, and where it lacks one the store does the job another
// way (see fallback).
type capabilities struct {
	Version version
	// TTL: retention by table TTL; else by dropping old partitions and
	// deleting rows of shorter-lived tenants.
	TTL bool
	// Codecs: CODEC(Delta, ZSTD) per column; else the server's compression
	// settings apply (the test config picks ZSTD for every part).
	Codecs bool
	// SkipIndexes: bloom filters on documents and ids; else those lookups
	// scan the tenant's rows of the time range.
	SkipIndexes bool
	// DedupToken: a retried insert carries insert_deduplication_token; else
	// the retry first asks which rows of the batch are already stored and
	// sends the rest. ReplacingMergeTree collapses duplicates in both cases.
	DedupToken bool
	// MutationsSync: ALTER ... DELETE waits through the mutations_sync
	// setting; else the store polls system.mutations.
	MutationsSync bool
	// LowCardinalityExperimental: LowCardinality needs
	// allow_experimental_low_cardinality_type=1 (18.x).
	LowCardinalityExperimental bool
}

// capabilitiesOf returns what a server version supports. The thresholds are
// conservative: each feature is used from a release where it is stable, not
// from the first one that had it.
func capabilitiesOf(v version) capabilities {
	return capabilities{
		Version:                    v,
		TTL:                        v.atLeast(21, 8), // with REMOVE TTL
		Codecs:                     v.atLeast(20, 3),
		SkipIndexes:                v.atLeast(20, 3),
		DedupToken:                 v.atLeast(22, 3),
		MutationsSync:              v.atLeast(20, 3),
		LowCardinalityExperimental: !v.atLeast(19, 1),
	}
}

// fallbacks lists the missing features and what is done instead, for one log
// line each at start.
func (c capabilities) fallbacks() []string {
	var out []string
	if !c.TTL {
		out = append(out, "no TTL: retention drops old day partitions and deletes the rows of shorter-lived tenants every retention.check_interval")
	}
	if !c.Codecs {
		out = append(out, "no column CODECs: parts use the server's compression settings (configure ZSTD in <compression>)")
	}
	if !c.SkipIndexes {
		out = append(out, "no data-skipping indexes: document and id lookups scan the tenant's rows of the time range")
	}
	if !c.DedupToken {
		out = append(out, "no insert_deduplication_token: a retried batch first skips the rows already stored; ReplacingMergeTree and FINAL collapse the rest")
	}
	if !c.MutationsSync {
		out = append(out, "no mutations_sync: deletes poll system.mutations until done")
	}
	return out
}

// logFallbacks logs each missing feature once.
func (c capabilities) logFallbacks(log *slog.Logger) {
	for _, f := range c.fallbacks() {
		log.Warn("clickhouse: server lacks a feature; using a fallback", "server_version", c.Version.String(), "fallback", f)
	}
}
