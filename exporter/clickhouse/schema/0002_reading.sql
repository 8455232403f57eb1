-- The dialect's reading of each call (audit.AppendReading): its operations,
-- keys and fingerprints, stored so that the detector never reads the
-- payloads again. Rows stored before this migration have it empty.
-- ADD COLUMN has no IF NOT EXISTS on every server: the store takes "column
-- already exists" as applied (a migration re-run after a start that failed
-- halfway).

ALTER TABLE {{table "calls"}}{{oncluster}} ADD COLUMN reading String{{codec "ZSTD(1)"}} AFTER failure_message;
{{if .Cluster}}
ALTER TABLE {{.DB}}.calls{{oncluster}} ADD COLUMN reading String AFTER failure_message;
{{end}}
