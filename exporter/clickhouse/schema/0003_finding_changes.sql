-- The finding lifecycle: every acknowledgement, resolution and reopening of
-- a finding, with who made it and why. A finding's state is its latest
-- change (open when it has none). Small: one row per change a person made.

CREATE TABLE IF NOT EXISTS {{table "finding_changes"}}{{oncluster}}
(
    tenant     LowCardinality(String),
    finding_id String,
    time       DateTime,
    time_nanos UInt32,
    state      LowCardinality(String),
    by         String,
    note       String,
    version    UInt64
)
ENGINE = {{engine "finding_changes" "version"}}
ORDER BY (finding_id, time, time_nanos)
{{settings}};

{{distributed "finding_changes" "cityHash64(finding_id)"}}
