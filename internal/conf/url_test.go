package conf

import (
	"strings"
	"testing"
)

func TestURLFault(t *testing.T) {
	const secret = "S3cretT0kenValue99"
	for _, c := range []struct {
		url      string
		fragment bool
		schemes  []string
		want     string
	}{
		{"https://bot:" + secret + "@hooks.example.com/services/T1/B1/x", false, []string{"http", "https"}, ""},
		{"https://wiki.example.com/runbooks", false, nil, ""},
		{"https://wiki.example.com/runbooks#" + secret, true, nil, ""},
		{"hooks.slack.com/services/T0001/B0001/" + secret, false, []string{"http", "https"}, "no scheme"},
		{"ftp://u:" + secret + "@files.example.com/", false, []string{"http", "https"}, "scheme is another"},
		{"https:///" + secret, false, nil, "no host"},
		{"https://wiki:" + secret + "@wiki.example.com/runbooks#top", false, nil, "#fragment"},
		{"https://u:" + secret + "@host:bad/x", false, nil, "does not parse"},
		{"%zz" + secret, false, nil, "does not parse"},
		{"https://hooks.example.com;" + secret + "/x", false, nil, "neither a DNS name nor an IP address"},
		{"https://hooks.example.com!" + secret + "/x", false, nil, "neither a DNS name nor an IP address"},
		{"https://[fe80::1%25eth0]:8443/x", false, nil, ""},
		{"https://10.0.0.7:9093/api", false, nil, ""},
		{"http://alertmanager_0.monitoring.svc:9093/", false, nil, ""},
	} {
		got := URLFault(c.url, c.fragment, c.schemes...)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("URLFault(%q) = %q, want %q", c.url, got, c.want)
		}
		if strings.Contains(got, secret) {
			t.Errorf("URLFault(%q) = %q: it repeats the secret", c.url, got)
		}
	}
}
