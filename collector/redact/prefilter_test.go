package redact

import (
	"math/rand"
	"strings"
	"testing"
)

// TestHintSet: the automaton says a pattern may match exactly when one of
// its literals is in the text, case folded, as a plain search would.
func TestHintSet(t *testing.T) {
	var ps []pattern
	for _, v := range DefaultValues {
		ps = append(ps, newPattern(v))
	}
	ps = append(ps, pattern{}) // no literal known: always
	h := newHintSet(ps)
	naive := func(text string, p pattern) bool {
		if p.hints == nil {
			return true
		}
		for _, lit := range p.hints {
			if strings.Contains(strings.ToLower(text), lit) {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewSource(1))
	alphabet := "abeksyjAIZGHPXO-_@:/=.  019"
	may := make([]bool, len(ps))
	texts := []string{"", "Bearer x", "see SK-LIVE-abc", "mail a@b.co", "eyJhb", "github_pat_", "-----BEGIN RSA PRIVATE KEY-----"}
	for range 20_000 {
		b := make([]byte, rng.Intn(24))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		texts = append(texts, string(b))
	}
	for _, text := range texts {
		h.scan(text, may)
		for i, p := range ps {
			if may[i] != naive(text, p) {
				t.Fatalf("text %q, pattern %d (%v): scan says %v", text, i, p.hints, may[i])
			}
		}
	}
}
