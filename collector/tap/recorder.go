package tap

import (
	"slices"
	"sync"
	"time"
)

// Key names one request in flight: its session, or for traffic without a
// session the scope the relay gives the exchange that carries it, and its id.
// A Key returned by FromClient also names that one request among others the
// client sent under the same id; one built by the caller names the oldest.
type Key struct {
	Session string
	Scope   uint64
	ID      string
	// n is the request's number in the Recorder; 0 in a Key built by the
	// caller.
	n uint64
}

// id returns k without its request number: the map key of its queue.
func (k Key) id() Key { k.n = 0; return k }

// pending is a tools/call request waiting for its response.
type pending struct {
	n       uint64
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

	mu  sync.Mutex
	seq uint64 // the last journal entry
	num uint64 // the last request number (Key.n)
	// pending holds the requests in flight by Key without its number, in
	// the order they came: JSON-RPC forbids a client two requests in flight
	// under one id, but a client may still send them (two calls of a batch
	// under one id, adv23's L2), and the server answers each.
	pending  map[Key][]*pending
	inflight int
	clients  map[string]string
}

// DefaultMaxSessions is how many sessions' clients a Recorder remembers.
const DefaultMaxSessions = 100_000

// NewRecorder returns a Recorder for the server named server that hands
// every record to emit.
func NewRecorder(server string, emit func(*Record)) *Recorder {
	return &Recorder{server: server, emit: emit, maxSessions: DefaultMaxSessions,
		pending: make(map[Key][]*pending), clients: make(map[string]string)}
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
			// A client that reuses an id still in flight gets each
			// answer all the same: the requests queue under the id, and
			// answers pair with them in the order they were sent (or
			// with the exchange's own, FromServerOn). Until adv23a the
			// first one ended unknown, recorded without a response
			// although its answer reached the client.
			r.num++
			k := Key{Session: session, Scope: scope, ID: m.ID, n: r.num}
			client := metaClient(m.Params)
			if client == "" {
				client = r.clients[session]
			}
			p := &pending{n: r.num, at: at, session: session, client: client, request: m.Raw}
			if r.journal != nil {
				r.seq++
				p.entry = r.seq
				begun = append(begun, &Record{Time: at, Server: r.server, Session: session, Client: client,
					Request: m.Raw, Entry: p.entry})
			}
			r.pending[k.id()] = append(r.pending[k.id()], p)
			r.inflight++
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
	r.FromServerOn(nil, session, scope, msgs, at)
}

// FromServerOn is FromServer for messages that came on the exchange that
// carried the requests of own: a response pairs with the request of own
// under its id first (a server answers a request on the stream of the
// POST that carried it), else with the oldest in flight under its id.
func (r *Recorder) FromServerOn(own []Key, session string, scope uint64, msgs []Message, at time.Time) {
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
		k := ownKey(own, Key{Session: session, Scope: scope, ID: m.ID}, r.pending)
		if rec := r.finishLocked(k, m.Raw, "", at); rec != nil {
			done = append(done, rec)
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
}

// ownKey returns the first key of own that names a request still pending
// under k's id, or k.
func ownKey(own []Key, k Key, inFlight map[Key][]*pending) Key {
	for _, o := range own {
		if o.id() == k && o.n != 0 && slices.ContainsFunc(inFlight[k], func(p *pending) bool { return p.n == o.n }) {
			return o
		}
	}
	return k
}

// Unrecordable ends, without a record, the request that a response too
// large to record answered: the one of own under id, else the oldest in
// flight under id in the session (or scope). It returns how many it ended
// (0 or 1). The relay passed the answer on; recording the call without it
// would report an outcome nobody lost (adv23's D2).
func (r *Recorder) Unrecordable(own []Key, session string, scope uint64, id string) int {
	if session != "" {
		scope = 0
	}
	r.mu.Lock()
	k := ownKey(own, Key{Session: session, Scope: scope, ID: id}, r.pending)
	r.mu.Unlock()
	return r.Forget([]Key{k})
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
		if p := r.takeLocked(k); p != nil {
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
		if r.findLocked(k) >= 0 {
			n++
		}
	}
	return n
}

// Len returns how many exchanges are in flight.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight
}

// EndSession forgets a session that ended and fails its requests still in
// flight with reason.
func (r *Recorder) EndSession(session, reason string, at time.Time) {
	var done []*Record
	r.mu.Lock()
	delete(r.clients, session)
	for k, q := range r.pending {
		if k.Session == session && session != "" {
			for range q {
				done = append(done, r.finishLocked(k, nil, reason, at))
			}
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
}

// Expire fails the requests received before before with reason.
func (r *Recorder) Expire(before time.Time, reason string, at time.Time) int {
	var done []*Record
	r.mu.Lock()
	for k, q := range r.pending {
		for _, p := range slices.Clone(q) {
			if p.at.Before(before) {
				k.n = p.n
				done = append(done, r.finishLocked(k, nil, reason, at))
			}
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
	return len(done)
}

// ForgetIf drops, without recording them, the requests in flight for which
// drop (given their session and when they came) returns true, and returns
// how many it dropped: for calls a message too large to record may have
// answered, where the relay could not read which.
func (r *Recorder) ForgetIf(drop func(session string, at time.Time) bool) int {
	var keys []Key
	r.mu.Lock()
	for k, q := range r.pending {
		for _, p := range q {
			if drop(p.session, p.at) {
				k.n = p.n
				keys = append(keys, k)
			}
		}
	}
	r.mu.Unlock()
	return r.Forget(keys)
}

// Close ends every request in flight with reason ("" when the relay
// cannot know their outcome) and returns how many it ended.
func (r *Recorder) Close(reason string, at time.Time) int {
	var done []*Record
	r.mu.Lock()
	for k, q := range r.pending {
		for range q {
			done = append(done, r.finishLocked(k, nil, reason, at))
		}
	}
	r.mu.Unlock()
	r.emitAll(done)
	return len(done)
}

// findLocked returns the index in its queue of the request k names: the
// one numbered k.n, or the oldest when k.n is 0; -1 when none is pending.
func (r *Recorder) findLocked(k Key) int {
	q := r.pending[k.id()]
	if k.n == 0 {
		if len(q) == 0 {
			return -1
		}
		return 0
	}
	return slices.IndexFunc(q, func(p *pending) bool { return p.n == k.n })
}

// takeLocked removes the request k names from the requests in flight and
// returns it, or nil when it is not pending.
func (r *Recorder) takeLocked(k Key) *pending {
	i := r.findLocked(k)
	if i < 0 {
		return nil
	}
	id := k.id()
	q := r.pending[id]
	p := q[i]
	if len(q) == 1 {
		delete(r.pending, id)
	} else {
		r.pending[id] = slices.Delete(q, i, i+1)
	}
	r.inflight--
	return p
}

func (r *Recorder) finishLocked(k Key, response []byte, transportErr string, at time.Time) *Record {
	p := r.takeLocked(k)
	if p == nil {
		return nil
	}
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
