package redact

import "sync"

// hintSet finds, in one pass over a text and without allocating, which
// patterns may match it: those with one of their required literals in it
// (ASCII case folded), and those without any known literal. It is an
// Aho-Corasick automaton over the literals.
type hintSet struct {
	// next is the goto function with the failure links folded in:
	// next[state][byte].
	next [][256]int32
	// out lists, per state, the patterns a literal ending there belongs to.
	out [][]int
	// always are the patterns without a literal.
	always []int
	n      int
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// newHintSet builds the automaton of the patterns' hints.
func newHintSet(ps []pattern) *hintSet {
	h := &hintSet{next: make([][256]int32, 1), out: make([][]int, 1), n: len(ps)}
	for i := range h.next[0] {
		h.next[0][i] = -1
	}
	for pi, p := range ps {
		if p.hints == nil {
			h.always = append(h.always, pi)
			continue
		}
		for _, lit := range p.hints {
			s := int32(0)
			for j := 0; j < len(lit); j++ {
				c := lowerASCII(lit[j])
				if h.next[s][c] < 0 {
					h.next = append(h.next, [256]int32{})
					h.out = append(h.out, nil)
					for k := range h.next[len(h.next)-1] {
						h.next[len(h.next)-1][k] = -1
					}
					h.next[s][c] = int32(len(h.next) - 1)
				}
				s = h.next[s][c]
			}
			h.out[s] = append(h.out[s], pi)
		}
	}
	// Breadth first: failure links, folded into next.
	fail := make([]int32, len(h.next))
	var queue []int32
	for c := range 256 {
		if t := h.next[0][c]; t < 0 {
			h.next[0][c] = 0
		} else {
			fail[t] = 0
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		h.out[s] = append(h.out[s], h.out[fail[s]]...)
		for c := range 256 {
			t := h.next[s][c]
			if t < 0 {
				h.next[s][c] = h.next[fail[s]][c]
				continue
			}
			fail[t] = h.next[fail[s]][c]
			queue = append(queue, t)
		}
	}
	return h
}

// scan marks in may the patterns that may match text; it returns whether
// any may. may must have one entry per pattern.
func (h *hintSet) scan(text string, may []bool) bool {
	clear(may)
	any := false
	for _, i := range h.always {
		may[i], any = true, true
	}
	s := int32(0)
	for i := 0; i < len(text); i++ {
		s = h.next[s][lowerASCII(text[i])]
		for _, pi := range h.out[s] {
			may[pi], any = true, true
		}
	}
	return any
}

// keyCache remembers what a key is (kept, secret or neither): objects
// repeat the same few keys. It holds at most keyCacheMax keys, so that a
// sender's keys cannot grow it.
type keyCache struct {
	mu sync.RWMutex
	m  map[string]mode
}

const keyCacheMax = 4096

func (c *keyCache) get(raw []byte) (mode, bool) {
	c.mu.RLock()
	m, ok := c.m[string(raw)]
	c.mu.RUnlock()
	return m, ok
}

func (c *keyCache) put(raw []byte, m mode) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]mode{}
	}
	if len(c.m) < keyCacheMax {
		c.m[string(raw)] = m
	}
	c.mu.Unlock()
}
