package main

import (
	"strings"
	"testing"
)

// TestProxyFlags_ErrorsNameTheFlags: the proxy has flags, not a config file,
// so a bad or missing value is named by its flag, once.
func TestProxyFlags_ErrorsNameTheFlags(t *testing.T) {
	f := func(args []string, want ...string) {
		t.Helper()
		code, _, errOut := cliRun(append([]string{"proxy", "--collector", "http://127.0.0.1:1"}, args...)...)
		if code != 2 {
			t.Errorf("proxy %v: exit %d, want 2", args, code)
		}
		if strings.Contains(errOut, "proxy.") {
			t.Errorf("proxy %v names a config key the operator never wrote:\n%s", args, errOut)
		}
		for _, w := range want {
			if strings.Count(errOut, w) != 1 {
				t.Errorf("proxy %v: want %q once in:\n%s", args, w, errOut)
			}
		}
	}
	f(nil, "--upstream: required", "--server: required")
	f([]string{"--server", "thegram", "--upstream", "127.0.0.1:9000"}, `--upstream: "127.0.0.1:9000" is not an http or https URL`)
	f([]string{"--server", "thegram", "--upstream", "http://127.0.0.1:9000", "--response-timeout", "-1s"}, "--response-timeout: must not be negative")
}
