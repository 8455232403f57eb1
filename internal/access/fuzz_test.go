package access_test

import (
	"testing"

	"github.com/mcpaudit/mcpaudit/internal/access"
)

// FuzzParseTokens: no tokens file makes the parser panic, and every
// credential it accepts can be used: a name, a tenant, a scope, and no
// ingest for every tenant.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(line("a", "acme", "ingest", "t1") + "# c\n\n" + line("b", "*", "query,metrics", "t2")))
	f.Add([]byte("a acme ingest sha256:zz\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := access.ParseTokens(b)
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Name == "" || e.Tenant == "" || e.Scopes == 0 || e.Tenant == access.AllTenants && e.Scopes&access.ScopeIngest != 0 {
				t.Fatalf("accepted an unusable credential %+v", e)
			}
		}
	})
}
