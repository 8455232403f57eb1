package clickhouse

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestOptions_Defaults(t *testing.T) {
	o := NewDefaultOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	if !o.CreateSchema || o.BatchSize < 1000 || o.BatchAge != time.Second {
		t.Errorf("defaults %+v: want create_schema, thousands of rows and 1s per batch", o)
	}
}

func TestOptions_YAML(t *testing.T) {
	const doc = `
dsn: clickhouse://audit:secret@ch-1:9000/default?dial_timeout=2s
database: audit
cluster: prod
replica: collector-0
batch_size: 5000
batch_age: 500ms
retention:
  default: 2160h
  tenants:
    acme: 168h
spool:
  dir: /var/lib/mcpaudit/spool
  max_bytes: 2147483648
`
	o := NewDefaultOptions()
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.BatchAge != 500*time.Millisecond || o.Retention.Tenants["acme"] != 168*time.Hour || o.Spool.MaxBytes != 2<<30 || !o.CreateSchema {
		t.Errorf("decoded %+v", o)
	}
	dec = yaml.NewDecoder(bytes.NewReader([]byte("batch_sise: 10\n")))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err == nil {
		t.Error("an unknown key decoded without error")
	}
}

func TestOptions_Validate(t *testing.T) {
	o := NewDefaultOptions()
	o.DSN = "mysql://nope"
	o.Database = "audit; DROP"
	o.Cluster = "a-b"
	o.BatchSize = 0
	o.Inserters = 0
	o.Retention.Tenants = map[string]time.Duration{"acme": 0}
	o.Spool.Dir = ""
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad options")
	}
	for _, path := range []string{"dsn:", "database:", "cluster:", "batch_size:", "inserters:", "retention.tenants.acme:", "spool.dir:"} {
		if !strings.Contains(err.Error(), path) {
			t.Errorf("the error does not name %s\n%v", path, err)
		}
	}
}
