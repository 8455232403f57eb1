package dialect

// literals returns the literals of text by key, for tests.
func literals(text string) map[string]string {
	out := map[string]string{}
	for _, l := range appendLiterals(nil, text) {
		out[l.key] = l.val
	}
	return out
}
