package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpaudit/mcpaudit/exporter/chain"
	"github.com/mcpaudit/mcpaudit/exporter/clickhouse"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite/calllogs"
	"github.com/mcpaudit/mcpaudit/internal/calllog"
	"github.com/mcpaudit/mcpaudit/internal/datadir"
)

const verifyUsage = `usage: mcpaudit verify (--data-dir DIR | --store clickhouse --clickhouse-dsn DSN [--clickhouse-database DB]) [--public-key FILE]...

Checks the stored history of a data dir against its tamper-evidence chains
and, with --public-key, against the checkpoints the collector signed
(serve.signing_key_file). After a key rotation give the public key of every
signing key the history was signed with: --public-key once per file (a file
may also hold several public keys, one PEM block after another). Each
checkpoint must verify with one of them; the report says which key signed
which checkpoints. A checkpoint none of them verifies, or one a retired key
signed after its successor took over, is TAMPERED. Every edit, deletion, insertion or reordering of
stored calls, findings and finding state changes is printed with its tenant,
chain entry and rows (the embedded store: row numbers; ClickHouse: ids).
With serve.sqlite.calls: log every block of the call logs is hashed again
and compared with the chain: a changed block, a truncated or deleted
segment (one retention removed is not) and a block no entry covers are
printed with their tenant, file and block.
Exit 0 when the history matches, 1 when it does not, 2 when it cannot be
checked. It only reads: a running collector may keep writing.

flags:
`

// verifyCommand implements mcpaudit verify.
func verifyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, verifyUsage); fs.PrintDefaults() }
	dir := fs.String("data-dir", "", "the data dir of the embedded store")
	var pubFiles keyFiles
	fs.Var(&pubFiles, "public-key", "PEM file of the Ed25519 public key(s) that check the checkpoints (mcpaudit keygen); repeatable: one per signing key the history was signed with")
	keyAlways := fs.Bool("key-always", false, "serve always ran with its signing key: a retention cut no checkpoint signed is a removal (TAMPERED), not a note")
	store := fs.String("store", "sqlite", "the store: sqlite (the embedded store, --data-dir) or clickhouse (--clickhouse-dsn)")
	chDSN := fs.String("clickhouse-dsn", "", "ClickHouse native-protocol DSN, with --store clickhouse")
	chDB := fs.String("clickhouse-database", clickhouse.NewDefaultOptions().Database, "the database of the ClickHouse store (serve.clickhouse.database)")
	if help, err := parseFlagsOnce(fs, args); help || err != nil {
		return err
	}
	var keys chain.Keys
	for _, f := range pubFiles {
		ks, err := chain.ReadPublicKeys(f)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		keys = keys.Add(ks...)
	}
	var r *chain.Report
	var err error
	switch *store {
	case "sqlite":
		if *dir == "" {
			return &exitError{code: 2, err: errors.New("--data-dir is required")}
		}
		path := filepath.Join(*dir, storeFile)
		if _, err := os.Stat(path); err != nil {
			return &exitError{code: 2, err: fmt.Errorf("cannot verify %s: %w", *dir, err)}
		}
		// The logs are opened once the store's snapshot is taken: a block
		// synced later is one the chain may not cover yet (a note), never
		// one the chain has and the logs lack. They are opened whether or
		// not calls/ holds a log: with calls/ gone, every block the chain
		// records is missing, not unchecked.
		r, err = sqlite.VerifyLogged(ctx, path, keys, func() (sqlite.BlockLog, error) {
			return calllogs.Open(calllogs.Dir(*dir), calllog.Options{ReadOnly: true})
		})
	case "clickhouse":
		if *chDSN == "" {
			return &exitError{code: 2, err: errors.New("--clickhouse-dsn is required with --store clickhouse")}
		}
		r, err = clickhouse.Verify(ctx, *chDSN, *chDB, keys)
	default:
		return &exitError{code: 2, err: fmt.Errorf("--store %s: want sqlite or clickhouse", *store)}
	}
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if *keyAlways {
		r.Strict()
	}
	r.Print(stdout)
	if !r.OK() {
		return &exitError{code: 1}
	}
	return nil
}

// keyFiles collects the --public-key files of verify.
type keyFiles []string

func (k *keyFiles) String() string     { return strings.Join(*k, ",") }
func (k *keyFiles) Set(s string) error { *k = append(*k, s); return nil }
func (k *keyFiles) repeatable()        {}

const keygenUsage = `usage: mcpaudit keygen --private-key FILE --public-key FILE

Writes a new Ed25519 key pair as PEM: the private key (0600) for the
collector's serve.signing_key_file, the public key for mcpaudit verify.
Neither file may exist.

flags:
`

// keygenCommand implements mcpaudit keygen.
func keygenCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, keygenUsage); fs.PrintDefaults() }
	privFile := fs.String("private-key", "", "where to write the private key")
	pubFile := fs.String("public-key", "", "where to write the public key")
	if help, err := parseFlagsOnce(fs, args); help || err != nil {
		return err
	}
	if *privFile == "" || *pubFile == "" {
		return &exitError{code: 2, err: errors.New("--private-key and --public-key are required")}
	}
	priv, pub, err := chain.GenerateKey()
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{*privFile, priv}, {*pubFile, pub}} {
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, datadir.FileMode)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("cannot write key: %w", err)}
		}
		if _, err := fh.Write(f.data); err != nil {
			fh.Close()
			return fmt.Errorf("cannot write key: %w", err)
		}
		if err := fh.Close(); err != nil {
			return fmt.Errorf("cannot write key: %w", err)
		}
	}
	keys, err := chain.ReadPublicKeys(*pubFile)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (keep it with the collector: serve.signing_key_file) and %s (for mcpaudit verify --public-key), key id %s\n", *privFile, *pubFile, keys[0].ID)
	return nil
}
