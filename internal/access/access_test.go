package access_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/internal/access"
)

func line(name, tenant, scopes, token string) string {
	return name + " " + tenant + " " + scopes + " " + access.FormatHash(access.HashToken(token)) + "\n"
}

func TestParseTokens(t *testing.T) {
	f := func(file, wantErr string, wantN int) {
		t.Helper()
		es, err := access.ParseTokens([]byte(file))
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("ParseTokens(%q): error %v, want one with %q", file, err, wantErr)
			}
			return
		}
		if err != nil || len(es) != wantN {
			t.Fatalf("ParseTokens(%q) = %d entries, %v; want %d", file, len(es), err, wantN)
		}
	}
	f("", "", 0)
	f("# comment\n\n"+line("a", "acme", "ingest", "t1")+line("b", "*", "query,metrics", "t2"), "", 2)
	f(line("a", "acme", "ingest", "t1")+"a acme ingest t1\n", "line 2: the hash must be sha256:", 0)
	f(line("a", "acme", "ingest", "t1")+line("a", "acme", "query", "t2"), "line 2: name a is line 1's too", 0)
	f(line("a", "*", "ingest", "t1"), "line 1: tenant * cannot have the ingest scope", 0)
	f(line("a", "acme", "write", "t1"), `line 1: unknown scope "write"`, 0)
	// Profiles are the whole process's: debug is for tenant * only.
	f(line("a", "acme", "query,debug", "t1"), "line 1: the debug scope needs tenant *", 0)
	f(line("a", "*", "debug", "t1"), "", 1)
	f("a acme ingest\n", "line 1: want 4 fields", 0)
	// A tenant that looks like another: a zero-width space, a
	// right-to-left override, a word joiner (adv23 D5: "ac\u200bme" was
	// accepted and shown as acme beside acme).
	for _, tenant := range []string{"ac\u200bme", "\u00fcn\u202ec\u00f6d", "acme\u2060", "ac\u00adme"} {
		f(line("a", tenant, "ingest", "t1"), "line 1: tenant must be visible UTF-8", 0)
	}
	f(line("a", "\u00fcn\u00efc\u00f6d\u00e9", "ingest", "t1"), "", 1)
	f("a acme ingest sha256:abcd\n", "line 1: the hash must be", 0)
	// Every bad line is reported, not only the first.
	f("x\n"+line("ok", "acme", "ingest", "t")+"y\n", "line 3", 0)
}

func TestAuthenticate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	os.WriteFile(file, []byte(line("agents", "acme", "ingest", "tok-agents")+line("ops", "*", "query,metrics", "tok-ops")), 0o600)
	static := []access.Entry{{Name: "globex", Tenant: "globex", Scopes: access.ScopeIngest | access.ScopeQuery, Hash: access.HashToken("tok-globex")}}
	a, err := access.New(access.Config{TokensFile: file}, static)
	if err != nil {
		t.Fatal(err)
	}
	f := func(authz string, wantOK bool, want access.Principal) {
		t.Helper()
		p, ok := a.Authenticate(authz, nil)
		if ok != wantOK || ok && p != want {
			t.Errorf("Authenticate(%q) = %+v, %v; want %+v, %v", authz, p, ok, want, wantOK)
		}
	}
	f("", false, access.Principal{})
	f("Bearer ", false, access.Principal{})
	f("Bearer wrong", false, access.Principal{})
	f("Basic dG9rLWFnZW50cw==", false, access.Principal{})
	f("Bearer tok-agents", true, access.Principal{Tenant: "acme", Name: "agents", Authenticated: true, Scopes: access.ScopeIngest})
	f("bearer  tok-agents ", true, access.Principal{Tenant: "acme", Name: "agents", Authenticated: true, Scopes: access.ScopeIngest})
	f("Bearer tok-ops", true, access.Principal{Name: "ops", Authenticated: true, Scopes: access.ScopeQuery | access.ScopeMetrics})
	f("Bearer tok-globex", true, access.Principal{Tenant: "globex", Name: "globex", Authenticated: true, Scopes: access.ScopeIngest | access.ScopeQuery})

	t.Run("reload", func(t *testing.T) {
		os.WriteFile(file, []byte(line("agents2", "acme", "ingest", "tok-new")), 0o600)
		if err := a.Reload(); err != nil {
			t.Fatal(err)
		}
		f("Bearer tok-agents", false, access.Principal{})
		f("Bearer tok-new", true, access.Principal{Tenant: "acme", Name: "agents2", Authenticated: true, Scopes: access.ScopeIngest})
		f("Bearer tok-globex", true, access.Principal{Tenant: "globex", Name: "globex", Authenticated: true, Scopes: access.ScopeIngest | access.ScopeQuery})
	})
	t.Run("bad_reload_keeps_the_credentials", func(t *testing.T) {
		os.WriteFile(file, []byte("garbage\n"), 0o600)
		if err := a.Reload(); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Fatalf("Reload of a bad file: %v, want an error naming line 1", err)
		}
		f("Bearer tok-new", true, access.Principal{Tenant: "acme", Name: "agents2", Authenticated: true, Scopes: access.ScopeIngest})
	})
	t.Run("off", func(t *testing.T) {
		off, err := access.New(access.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := off.Authenticate("Bearer anything", nil)
		if !ok || p.Authenticated || p.Tenant != "" || !p.Can(access.ScopeIngest) || !p.Can(access.ScopeMetrics) {
			t.Fatalf("authentication off: %+v %v, want an anonymous principal of every tenant and scope", p, ok)
		}
	})
}

func TestConflict(t *testing.T) {
	acme := access.Principal{Tenant: "acme", Authenticated: true, Scopes: access.ScopeQuery}
	all := access.Principal{Authenticated: true, Scopes: access.ScopeQuery}
	f := func(p access.Principal, target string, headers map[string]string, wantErr string, wantTenant string) {
		t.Helper()
		r := httptest.NewRequest("GET", target, nil)
		for k, v := range headers {
			r.Header.Set(k, v)
		}
		err := access.Conflict(p, r)
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("Conflict(%+v, %s, %v) = %v, want %q", p, target, headers, err, wantErr)
		}
		if err == nil && access.Tenant(p, r) != wantTenant {
			t.Errorf("Tenant(%+v, %s) = %q, want %q", p, target, access.Tenant(p, r), wantTenant)
		}
	}
	f(acme, "/x", nil, "", "acme")
	f(acme, "/x?tenant=acme", map[string]string{"X-Scope-OrgID": "acme"}, "", "acme")
	f(acme, "/x?tenant=globex", nil, `parameter tenant names tenant "globex"`, "")
	f(acme, "/x", map[string]string{"X-Scope-OrgID": "globex"}, `header X-Scope-OrgID names tenant "globex"`, "")
	f(acme, "/x", map[string]string{"Mcpaudit-Tenant": "globex"}, `header Mcpaudit-Tenant`, "")
	f(all, "/x?tenant=globex", nil, "", "globex")
	f(all, "/x", nil, "", "")
	// tenant=* is every tenant, as no parameter is (adv23 L1: it read a
	// tenant named * and answered nothing); for a tenant's credential it
	// names another tenant.
	f(all, "/x?tenant=*", nil, "", "")
	f(all, "/x?tenant=%2A", nil, "", "")
	f(acme, "/x?tenant=*", nil, `parameter tenant names tenant "*"`, "")
}
