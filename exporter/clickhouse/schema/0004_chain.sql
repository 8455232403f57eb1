-- Tamper evidence (package chain, docs/storage.md): a hash chain per tenant
-- and collector replica over the calls, findings and finding state changes
-- stored. Every stored row carries chain_entry, the nonce of the chain entry
-- that covers it (0: stored before this migration); an entry lists the ids,
-- content hashes and times of its rows. ADD COLUMN is taken as applied when
-- the column exists (see 0002).

ALTER TABLE {{table "calls"}}{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
ALTER TABLE {{table "findings"}}{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
ALTER TABLE {{table "finding_changes"}}{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
{{if .Cluster}}
ALTER TABLE {{.DB}}.calls{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
ALTER TABLE {{.DB}}.findings{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
ALTER TABLE {{.DB}}.finding_changes{{oncluster}} ADD COLUMN chain_entry UInt64 AFTER version;
{{end}}
-- One row per chain entry. nonce is what the rows' chain_entry holds; sums
-- (the first 16 bytes of the SHA-256 of each row's id and contents) and
-- times (its event time) list the rows in the order the digest takes them.
CREATE TABLE IF NOT EXISTS {{meta "chain"}}{{oncluster}}
(
    tenant     String,
    replica    String,
    seq        UInt64,
    kind       String,
    nonce      UInt64,
    n          UInt64,
    digest     String,
    prev       String,
    hash       String,
    time       DateTime,
    time_nanos UInt32,
    sums       Array(FixedString(16)),
    times      Array(UInt32)
)
ENGINE = {{metaengine "chain" "seq"}}
ORDER BY (tenant, replica, seq);

-- Where retention cut each chain: the first entry kept, its prev, and the
-- cutoff before which rows may be gone. The highest version is in force.
CREATE TABLE IF NOT EXISTS {{meta "chain_cuts"}}{{oncluster}}
(
    tenant  String,
    replica String,
    seq     UInt64,
    prev    String,
    before  DateTime,
    version UInt64
)
ENGINE = {{metaengine "chain_cuts" "version"}}
ORDER BY (tenant, replica);

-- Checkpoints: each replica's heads and cuts, signed with Ed25519.
CREATE TABLE IF NOT EXISTS {{meta "checkpoints"}}{{oncluster}}
(
    replica String,
    seq     UInt64,
    time    DateTime,
    body    String,
    sig     String
)
ENGINE = {{metaengine "checkpoints" "seq"}}
ORDER BY (replica, seq);
