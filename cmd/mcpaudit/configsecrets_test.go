package main

import (
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/internal/conf"
)

// configNotSecrets are the keys named like a secret that hold none, and
// why.
var configNotSecrets = map[string]string{
	"serve.signing_key_file":      "a path; the key stays in its file",
	"serve.tls.key_file":          "a path; the key stays in its file",
	"serve.auth.tokens_file":      "a path; the file holds hashes",
	"serve.auth.client_certs":     "certificate subjects, which are public",
	"serve.credentials":           "the credentials' names; their tokens are serve.credentials.*.token",
	"serve.tls.cert_file":         "a path to a public certificate",
	"serve.tls.client_auth":       "optional or require",
	"redact.secret_file":          "a path; the key stays in its file",
	"redact.keys":                 "regular expressions over argument names",
	"redact.keep":                 "argument names",
	"dialects.writes.*.*.key_arg": "the name of an argument",
}

// secretNamed matches a key named like one that holds a secret.
var secretNamed = regexp.MustCompile(`(?i)token|passw|secret|key|url|dsn|header|credential|auth|cert`)

// configKeys lists the keys of t that hold text (strings, lists and maps
// of them), by path as configSecrets writes them.
func configKeys(t reflect.Type, path string, out map[string]reflect.Type) {
	switch t.Kind() {
	case reflect.Struct:
		conf.EachKey(t, func(name string, index []int) {
			configKeys(t.FieldByIndex(index).Type, strings.TrimPrefix(path+"."+name, "."), out)
		})
	case reflect.Pointer:
		configKeys(t.Elem(), path, out)
	case reflect.Map:
		out[path] = t
		configKeys(t.Elem(), path+".*", out)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			out[path] = t
		}
	case reflect.String:
		out[path] = t
	}
}

// TestConfigSecrets keeps configSecrets honest: every key of Config named
// like a secret is redacted by config print or said not to be a secret,
// and every entry of configSecrets is a key.
func TestConfigSecrets(t *testing.T) {
	keys := map[string]reflect.Type{}
	configKeys(reflect.TypeOf(Config{}), "", keys)
	var paths []string
	for p := range keys {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		last := p[strings.LastIndexByte(p, '.')+1:]
		if last == "*" {
			continue // the values of a map: their map was checked
		}
		_, secret := configSecrets[p]
		_, not := configNotSecrets[p]
		if secretNamed.MatchString(last) && !secret && !not {
			t.Errorf("%s is named like a secret: add it to configSecrets (config print hides it) or configNotSecrets (with the reason)", p)
		}
	}
	for p := range configSecrets {
		if _, ok := keys[p]; !ok {
			t.Errorf("configSecrets names %s, which is no key of Config", p)
		}
	}
	for p := range configNotSecrets {
		if _, ok := keys[p]; !ok {
			t.Errorf("configNotSecrets names %s, which is no key of Config", p)
		}
	}
}

// TestConfigPrint_HidesEverySecret: config print shows none of the
// secrets put in every key of configSecrets, and what it prints loads.
func TestConfigPrint_HidesEverySecret(t *testing.T) {
	const (
		pass  = "hunter2pass"
		tok   = "T0kenSecretValue12345"
		query = "qsecretvalue"
	)
	fills := map[string]string{
		"serve.receiver.tenants":    "  receiver: {tenants: {\"" + tok + "-rx\": acme}}\n",
		"serve.credentials.*.token": "  credentials: {ops: {token: " + tok + "-cred, tenant: \"*\"}}\n",
		"serve.web.notify.headers":  "",
		"serve.web.notify.url":      "",
		"serve.web.base_url":        "",
		"serve.clickhouse.dsn":      "  clickhouse: {dsn: \"clickhouse://app:" + pass + "@ch.example.com:9000/default?password=" + query + "\"}\n",
		"rules.runbook_url":         "",
	}
	for p := range configSecrets {
		if _, ok := fills[p]; !ok {
			t.Fatalf("no secret is put in %s: add one to this test", p)
		}
	}
	p := writeConfig(t, "serve:\n"+fills["serve.receiver.tenants"]+fills["serve.credentials.*.token"]+fills["serve.clickhouse.dsn"]+
		"  web:\n"+
		"    base_url: \"https://viewer:"+pass+"@mcpaudit.example.com/?access_token="+query+"\"\n"+
		"    notify:\n"+
		"      url: \"https://bot:"+pass+"@hooks.example.com/services/T0001/B0001/"+tok+"?token="+query+"&channel=ops\"\n"+
		"      headers: {Authorization: \"Bearer "+tok+"-hdr\", X-Api-Key: \"raw-"+query+"\"}\n"+
		"rules:\n"+
		"  runbook_url: \"https://wiki:"+pass+"@wiki.example.com/runbooks?sig="+query+"\"\n")
	code, out, errs := cliRun("config", "print", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, secret := range []string{pass, tok, query} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows the secret %q:\n%s", secret, out)
		}
	}
	// What is not secret stays: the hosts, the user names but the
	// webhook's, the header names, the tenant.
	for _, want := range []string{"https://REDACTED@hooks.example.com/REDACTED?REDACTED", "Authorization: '[REDACTED]'", "X-Api-Key:", "app:REDACTED@ch.example.com", "acme"} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	if _, err := LoadConfig(writeConfig(t, out)); err != nil {
		t.Errorf("the printed config does not load: %v\n%s", err, out)
	}
}

// TestConfigValidate_HidesSecretsInBadURLs: a URL that config validate
// refuses is named by its line and key and what is wrong with it, never
// repeated: a webhook URL written without its scheme holds its secret in the
// path, a runbook URL with a #fragment its password, and config validate's
// output and serve's log are read by more people than the file.
func TestConfigValidate_HidesSecretsInBadURLs(t *testing.T) {
	const (
		pass = "hunter2pass"
		tok  = "T0kenSecretValue12345"
	)
	p := writeConfig(t, "serve:\n"+
		"  web:\n"+
		"    base_url: \"mcpaudit.example.com/?access_token="+tok+"\"\n"+
		"    notify:\n"+
		"      url: \"hooks.slack.com/services/T0001/B0001/"+tok+"\"\n"+
		"rules:\n"+
		"  runbook_url: \"https://wiki:"+pass+"@wiki.example.com/runbooks#top\"\n")
	code, out, errs := cliRun("config", "validate", p)
	if code == 0 {
		t.Fatalf("config validate took the bad URLs:\n%s%s", out, errs)
	}
	for _, want := range []string{"line 3: serve.web.base_url: want an http or https URL", "line 5: serve.web.notify.url: want an http or https URL",
		"line 7: rules.runbook_url: want an absolute URL without a #fragment", "it has no scheme", "it has a #fragment"} {
		if !strings.Contains(errs, want) {
			t.Errorf("config validate does not say %q:\n%s", want, errs)
		}
	}
	for _, secret := range []string{pass, tok} {
		if strings.Contains(out+errs, secret) {
			t.Errorf("config validate shows the secret %q:\n%s%s", secret, out, errs)
		}
	}
}

// TestRedactWebhookURL: of a webhook's URL, config print shows only the
// scheme and the host, whatever its path and query look like: Slack's
// secret is 24 letters and digits, but a short one, a letters-only one or
// one in a plain-named query parameter is a secret all the same.
func TestRedactWebhookURL(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := redactWebhookURL(in); got != want {
			t.Errorf("redactWebhookURL(%q) = %q, want %q", in, got, want)
		}
	}
	f("https://hooks.slack.com/services/T000/B000/XXXXXXXX", "https://hooks.slack.com/REDACTED")
	f("https://hooks.slack.com/services/T00000000/B00000000/abcdefghijklmnopqrstuvwx", "https://hooks.slack.com/REDACTED")
	f("https://discord.com/api/webhooks/1234/s3cr3t", "https://discord.com/REDACTED")
	f("https://hooks.example.com:8443/notify?key=abc&channel=ops", "https://hooks.example.com:8443/REDACTED?REDACTED")
	f("https://hooks.example.com/?c=abc", "https://hooks.example.com/?REDACTED")
	f("https://bot:hunter2@hooks.example.com/x#frag", "https://REDACTED@hooks.example.com/REDACTED#REDACTED")
	f("https://bot@hooks.example.com/%2Fsecret%2F", "https://REDACTED@hooks.example.com/REDACTED")
	f("https://hooks.example.com/", "https://hooks.example.com/")
	f("https://hooks.example.com", "https://hooks.example.com")
	f("http://[::1]:9000/hook", "http://[::1]:9000/REDACTED")
	f("hooks.slack.com/services/T000/B000/XXXXXXXX", "REDACTED") // no scheme: no host either
	f("https://hooks.example.com/a b\x7f%zz", "REDACTED")        // does not parse
}

// TestConfigPrint_WebhookSecrets: config print shows none of the secrets
// of webhook URLs that the token-like rule of other URLs would miss (short,
// letters only, in a plain-named query parameter), and what it prints
// loads.
func TestConfigPrint_WebhookSecrets(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"https://hooks.slack.com/services/T000/B000/XXXXXXXX", "XXXXXXXX"},
		{"https://hooks.slack.com/services/T000/B000/lettersonlysecretvalue", "lettersonlysecretvalue"},
		{"https://chat.example.com/v1/spaces/AAAA/messages?key=k9x&thread=abcdef", "k9x"},
		{"https://chat.example.com/v1/spaces/AAAA/messages?key=k9x&thread=abcdef", "abcdef"},
		{"https://hooks.example.com/T000/B000/XXXXXXXX", "T000/B000"},
	} {
		p := writeConfig(t, "serve:\n  web:\n    notify:\n      url: \""+tc.url+"\"\n")
		code, out, errs := cliRun("config", "print", p)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.url, code, errs)
		}
		if strings.Contains(out, tc.secret) || !strings.Contains(out, "/REDACTED") {
			t.Errorf("config print of %s shows %q or no REDACTED:\n%s", tc.url, tc.secret, out)
		}
		if _, err := LoadConfig(writeConfig(t, out)); err != nil {
			t.Errorf("the printed config does not load: %v\n%s", err, out)
		}
	}
}
