package conf

import (
	"net/netip"
	"net/url"
	"slices"
)

// URLFault says why s is not an absolute URL with one of schemes (any scheme
// when none is given) and a host, and, unless fragment, without a #fragment;
// "" when it is one. It never quotes s or a part of it: a URL in the
// configuration may hold a password, a token in its query or path (a
// webhook's secret) or in its fragment, and a configuration error is printed
// by config validate and logged by serve.
func URLFault(s string, fragment bool, schemes ...string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "it does not parse as a URL"
	case u.Scheme == "":
		return "it has no scheme"
	case len(schemes) > 0 && !slices.Contains(schemes, u.Scheme):
		return "its scheme is another"
	case u.Host == "":
		return "it has no host"
	case !hostName(u.Hostname()):
		// url.Parse takes any of RFC 3986's sub-delimiters in a host
		// ("hooks.example.com;TOKEN"): no resolver does, and config print,
		// which shows a webhook's host, would show what follows it.
		return "its host is neither a DNS name nor an IP address"
	case !fragment && u.Fragment != "":
		return "it has a #fragment"
	}
	return ""
}

// hostName reports whether h is an IP address or a DNS name: letters,
// digits, '-', '_' and '.'.
func hostName(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
