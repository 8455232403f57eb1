-- The tables of the ClickHouse store. This file is a Go text/template: the
-- store adds ON CLUSTER, Replicated engines, CODECs, skip indexes and table
-- settings only where the server and the configuration have them, so that
-- every server gets the same tables and the same queries.
--
-- Times are DateTime (seconds, UTC) plus a UInt32 of nanoseconds: every
-- supported server has DateTime, and TTL and partitions need one.
-- Tables are ReplacingMergeTree so that a row stored twice (a retry whose
-- acknowledgement was lost) collapses; queries read them with FINAL.

CREATE TABLE IF NOT EXISTS {{table "calls"}}{{oncluster}}
(
    tenant          LowCardinality(String){{codec "ZSTD(1)"}},
    server          LowCardinality(String){{codec "ZSTD(1)"}},
    -- document is the first document the call touched; it orders the
    -- table. other_documents holds the rest.
    document        String{{codec "ZSTD(1)"}},
    time            DateTime{{codec "Delta, ZSTD(1)"}},
    time_nanos      UInt32{{codec "ZSTD(1)"}},
    id              String{{codec "ZSTD(1)"}},
    other_documents Array(String){{codec "ZSTD(1)"}},
    duration_ns     Int64{{codec "ZSTD(1)"}},
    session         String{{codec "ZSTD(1)"}},
    client          LowCardinality(String){{codec "ZSTD(1)"}},
    trace_id        String{{codec "ZSTD(1)"}},
    span_id         String{{codec "ZSTD(1)"}},
    -- fingerprint is kept only when it is not the one derived from the
    -- request (flag 64 says it is derived).
    fingerprint     String{{codec "ZSTD(1)"}},
    rpc_id          String{{codec "ZSTD(1)"}},
    method          LowCardinality(String){{codec "ZSTD(1)"}},
    tool            LowCardinality(String){{codec "ZSTD(1)"}},
    tool_label      LowCardinality(String){{codec "ZSTD(1)"}},
    arguments       String{{codec "ZSTD(3)"}},
    result          String{{codec "ZSTD(3)"}},
    error_code      Int64{{codec "ZSTD(1)"}},
    error_message   String{{codec "ZSTD(1)"}},
    error_data      String{{codec "ZSTD(1)"}},
    transport_error LowCardinality(String){{codec "ZSTD(1)"}},
    source          String{{codec "ZSTD(1)"}},
    outcome         LowCardinality(String){{codec "ZSTD(1)"}},
    failure_code    LowCardinality(String){{codec "ZSTD(1)"}},
    failure_action  LowCardinality(String){{codec "ZSTD(1)"}},
    failure_message String{{codec "ZSTD(1)"}},
    -- flags: 1 arguments present, 2 responded, 4 result present,
    -- 8 error present, 16 error data present, 32 failure present,
    -- 64 fingerprint derived.
    flags           UInt8{{codec "ZSTD(1)"}},
    -- version is the inverted time of the first insert: when one id is
    -- stored twice, the first copy wins.
    version         UInt64{{codec "ZSTD(1)"}}{{if .Caps.SkipIndexes}},
    INDEX documents_bf arrayPushFront(other_documents, document) TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX id_bf id TYPE bloom_filter(0.01) GRANULARITY 4{{end}}
)
ENGINE = {{engine "calls" "version"}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (tenant, server, document, time, id)
{{settings}};

{{distributed "calls" "cityHash64(id)"}}

CREATE TABLE IF NOT EXISTS {{table "writes"}}{{oncluster}}
(
    tenant      LowCardinality(String){{codec "ZSTD(1)"}},
    server      LowCardinality(String){{codec "ZSTD(1)"}},
    document    String{{codec "ZSTD(1)"}},
    time        DateTime{{codec "Delta, ZSTD(1)"}},
    time_nanos  UInt32{{codec "ZSTD(1)"}},
    call_id     String{{codec "ZSTD(1)"}},
    seq         Int32{{codec "ZSTD(1)"}},
    session     String{{codec "ZSTD(1)"}},
    tool        LowCardinality(String){{codec "ZSTD(1)"}},
    key         String{{codec "ZSTD(1)"}},
    state       LowCardinality(String){{codec "ZSTD(1)"}},
    reason      LowCardinality(String){{codec "ZSTD(1)"}},
    action      LowCardinality(String){{codec "ZSTD(1)"}},
    -- state_delay_ns is the state time minus time, mostly 0
    -- (-9223372036854775808: no state time).
    state_delay_ns Int64{{codec "ZSTD(1)"}},
    -- version orders the states of one write attempt: the highest wins.
    version     UInt64{{codec "Delta, ZSTD(1)"}}{{if .Caps.SkipIndexes}},
    INDEX call_id_bf call_id TYPE bloom_filter(0.01) GRANULARITY 4{{end}}
)
ENGINE = {{engine "writes" "version"}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (tenant, server, document, time, call_id, seq)
{{settings}};

{{distributed "writes" "cityHash64(call_id)"}}

CREATE TABLE IF NOT EXISTS {{table "findings"}}{{oncluster}}
(
    tenant       LowCardinality(String){{codec "ZSTD(1)"}},
    server       LowCardinality(String){{codec "ZSTD(1)"}},
    document     String{{codec "ZSTD(1)"}},
    time         DateTime{{codec "Delta, ZSTD(1)"}},
    time_nanos   UInt32{{codec "ZSTD(1)"}},
    id           String{{codec "ZSTD(1)"}},
    kind         LowCardinality(String){{codec "ZSTD(1)"}},
    severity     LowCardinality(String){{codec "ZSTD(1)"}},
    key          String{{codec "ZSTD(1)"}},
    session      String{{codec "ZSTD(1)"}},
    calls        Array(String){{codec "ZSTD(1)"}},
    reason       LowCardinality(String){{codec "ZSTD(1)"}},
    retry_action LowCardinality(String){{codec "ZSTD(1)"}},
    summary      String{{codec "ZSTD(3)"}},
    -- version: as in calls, the first copy of a finding wins.
    version      UInt64{{codec "ZSTD(1)"}}{{if .Caps.SkipIndexes}},
    INDEX id_bf id TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX key_bf key TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX session_bf session TYPE bloom_filter(0.01) GRANULARITY 4{{end}}
)
ENGINE = {{engine "findings" "version"}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (tenant, server, document, time, id)
{{settings}};

{{distributed "findings" "cityHash64(id)"}}

-- One row per collector replica; the highest version is its watermark.
CREATE TABLE IF NOT EXISTS {{table "watermarks"}}{{oncluster}}
(
    replica    String,
    time       DateTime,
    time_nanos UInt32,
    version    UInt64
)
ENGINE = {{engine "watermarks" "version"}}
ORDER BY replica
{{settings}};

{{distributed "watermarks" "cityHash64(replica)"}}

-- The retention policy last applied as TTL to each table, so that a
-- restart with the same policy does not rewrite the TTL.
CREATE TABLE IF NOT EXISTS {{meta "retention_policies"}}{{oncluster}}
(
    table_name String,
    policy     String,
    applied_at DateTime,
    version    UInt64
)
ENGINE = {{metaengine "retention_policies" "version"}}
ORDER BY table_name;
