-- The calls the detector counted too late to be judged (audit.Results.TooLate),
-- inserted with the output of the commit that names them: the replay after a
-- restart passes over them, as the live run did. Few rows: too-late calls are
-- rare. Retention treats it as it does calls (TTL, deletes), by time and tenant.

CREATE TABLE IF NOT EXISTS {{table "too_late"}}{{oncluster}}
(
    tenant     LowCardinality(String),
    time       DateTime,
    time_nanos UInt32,
    call_id    String,
    version    UInt64
)
ENGINE = {{engine "too_late" "version"}}
PARTITION BY toYYYYMMDD(time)
ORDER BY (tenant, time, call_id)
{{settings}};

{{distributed "too_late" "cityHash64(call_id)"}}
