package tap

import (
	"sync"
	"time"
)

// Key names one request in flight: its session, or for traffic without a
// session the scope the relay gives the exchange that carries it, and its id.
type Key struct {
	Session string
	Scope   uint64
	ID      string
}

// pending is a tools/call request waiting for its response.
type pending struct {
	at      time.Time
	session string
	client  string
	request []byte
	entry   uint64 // in the journal; 0 without one
}

// Journal keeps the requests in flight where a crash of the relay does not
// lose them, so that the next relay records them without a response. Begin
// and End are called without the Recorder's lock held, from any goroutine,
// and End may come before the Begin of its entry.
type Journal interface {
	// Begin notes the request of entry as in flight: r is its record as it
	// would be written without a response.
	Begin(entry uint64, r *Record)
	// End notes that the exchange of entry ended: its record was handed
	// on (Record.Entry), or it is not to be recorded.
	End(entry uint64)
}

// Recorder pairs tools/call requests with their responses and emits a
// Record for each exchange. It is safe for concurrent use; emit is called
// without the Recorder's lock held, from the goroutine that completed the
// exchange, and must not block for long.
type Recorder struct {
	server string
	emit   func(*Record)
	// maxSessions bounds the clients remembered by session.
	maxSessions int

	journal Journal

	mu      sync.Mutex
	seq     uint64 // the last journal entry
	pending map[Key]*pending
	clients map[string]string
}

// DefaultMaxSessions is how many sessions' clients a Recorder remembers.
const DefaultMaxSessions = 100_000

// NewRecorder returns a Recorder for the server named server that hands
// every record to emit.
func NewRecorder(server string, emit func(*Record)) *Recorder {
	return &Recorder{server: server, emit: emit, maxSessions: DefaultMaxSessions,
		pending: make(map[Key]*pending), clients: make(map[string]string)}
}

// SetJournal makes r note every tools/call request in j when it starts;
// whoever takes the records calls j.End(rec.Entry) once a record is
// buffered. It must be called before the first message.
func (r *Recorder) SetJournal(j Journal) { r.journal = j }

// SetClient remembers the client ("name/version") of a session; stdio
// relays use the session "".
func (r *Recorder) SetClient(session, client string) {
	if client == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.clients[session]; !ok && len(r.clients) >= r.maxSessions {
		// A bound, not an LRU: the sessions whose DELETE never came are
		// the ones forgotten first only by chance, which costs their
		// records the client name, not the records.
		for k := range r.clients {
			delete(r.clients, k)
			break
		}
	}
	r.clients[session] = client
}

// FromClient takes the messages a client sent in one body, event or line,
// received at at. It starts an exchange for each tools/call request and
// returns their keys, so that the relay can fail them if the transport
// that carries them breaks; a notifications/cancelled ends the request it
// names as canceled. scope is ignored when session is not empty.
func (r *Recorder) FromClient(session string, scope uint64, msgs []Message, at time.Time) []Key {
	if session != "" {
		scope = 0
	}
	var keys []Key
	var done, begun []*Record
	r.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Kind == KindRequest && m.Method == "tools/call":
			k := Key{Session: session, Scope: scope, ID: m.ID}
			if _, dup := r.pending[k]; dup {
				// The client reused an id still in flight: JSON-RPC
				// forbids it, and the answer can no longer be told
				// apart. The first exchange ends unknown.
				done = append(done, r.finishLocked(k, nil, "", at))
			}
			client := metaClient(m.Params)
			if client == "" {
				client = r.clients[session]
			}
			p := &pending{at: at, session: session, client: client, request: m.Raw}
			if r.journal != nil {
				r.seq++
				p.entry = r.seq
				begun = append(begun, &Record{Time: at, Server: r.server, Session: session, Client: client,
					Request: m.Raw, Entry: p.entry})
			}
			r.pending[k] = p
			keys = append(keys, k)
		case m.Kind == KindNotification && m.Method == "notifications/cancelled":
			k := Key{Session: session, Scope: scope, ID: cancelledID(m.Params)}
			if rec := r.finishLocked(k, nil, ErrCanceled, at); rec != nil {
				done = append(done, rec)
			}
		}
	}
	r.mu.Unlock()
	// Written outside the lock: a write to the journal holds only its own
	// exchange. An exchange that ends meanwhile has its End first, which
	// the journal takes.
	for _, rec := range begun {
		r.journal.Begin(rec.Entry, rec)
	}
	r.emitAll(done)
	return keys
}

// FromServer takes the messages a server sent in one body, event or line,
// received at at: each response to a pending tools/call completes its
// exchange. Server-to-client requests and notifications are ignored.
func (r *Recorder) FromServer(session string, scope uint64, msgs []Message, at time.Time) {
	if session != "" {
		scope = 0
	}
	var done []*Record
	r.mu.Lock()
	for i := range msgs {
		m := &msgs[i]
		if m.Kind != KindResponse {
			continue
		}
		if rec := r.finishLocked(Key{Session: session, Scope: scope, ID: m.ID}, m.Raw, "", at); rec != nil {
			done = append(done, rec)
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
}

// Fail ends the requests of keys that are still pending with the transport
// error reason, and returns how many it ended.
func (r *Recorder) Fail(keys []Key, reason string, at time.Time) int {
	var done []*Record
	r.mu.Lock()
	for _, k := range keys {
		if rec := r.finishLocked(k, nil, reason, at); rec != nil {
			done = append(done, rec)
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
	return len(done)
}

// Forget drops the requests of keys without recording them, and returns
// how many were pending: for exchanges whose answers the relay cannot see.
func (r *Recorder) Forget(keys []Key) int {
	var entries []uint64
	r.mu.Lock()
	n := 0
	for _, k := range keys {
		if p, ok := r.pending[k]; ok {
			delete(r.pending, k)
			n++
			if p.entry != 0 {
				entries = append(entries, p.entry)
			}
		}
	}
	r.mu.Unlock()
	for _, e := range entries {
		r.journal.End(e)
	}
	return n
}

// Pending returns how many keys are still waiting for their response.
func (r *Recorder) Pending(keys []Key) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range keys {
		if _, ok := r.pending[k]; ok {
			n++
		}
	}
	return n
}

// Len returns how many exchanges are in flight.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// EndSession forgets a session that ended and fails its requests still in
// flight with reason.
func (r *Recorder) EndSession(session, reason string, at time.Time) {
	var done []*Record
	r.mu.Lock()
	delete(r.clients, session)
	for k := range r.pending {
		if k.Session == session && session != "" {
			done = append(done, r.finishLocked(k, nil, reason, at))
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
}

// Expire fails the requests received before before with reason.
func (r *Recorder) Expire(before time.Time, reason string, at time.Time) int {
	var done []*Record
	r.mu.Lock()
	for k, p := range r.pending {
		if p.at.Before(before) {
			done = append(done, r.finishLocked(k, nil, reason, at))
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
	return len(done)
}

// Close ends every request in flight with reason ("" when the relay
// cannot know their outcome) and returns how many it ended.
func (r *Recorder) Close(reason string, at time.Time) int {
	var done []*Record
	r.mu.Lock()
	for k := range r.pending {
		done = append(done, r.finishLocked(k, nil, reason, at))
	}
	r.mu.Unlock()
	r.emitAll(done)
	return len(done)
}

func (r *Recorder) finishLocked(k Key, response []byte, transportErr string, at time.Time) *Record {
	p, ok := r.pending[k]
	if !ok {
		return nil
	}
	delete(r.pending, k)
	d := at.Sub(p.at)
	if d < 0 {
		d = 0
	}
	return &Record{Time: p.at, Duration: d, Server: r.server, Session: p.session, Client: p.client,
		Request: p.request, Response: response, TransportError: transportErr, Entry: p.entry}
}

func (r *Recorder) emitAll(recs []*Record) {
	for _, rec := range recs {
		r.emit(rec)
	}
}
