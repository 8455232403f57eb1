package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/store"
)

var _ audit.ResponseComparer = (*Store)(nil)

// AppendCallsCompared is AppendCalls that also returns the indexes, in
// order, of the calls it skipped (their key stored, or earlier in calls)
// whose response differs from the stored call's (audit.ResponseComparer).
// Only batches with skipped calls cost more: the stored calls of their
// keys are read back (through the id index, a few statements a batch),
// decoded, and the two responses summed as stored (store.StoredResponse). With Ack "log" the comparison first waits for
// the call log to be committed as far as this append (up to LogWait, at
// most compareWait), so
// that a copy earlier in the log is compared too. A stored call that
// cannot be read (retention deleted it meanwhile, or the wait or a read
// fails: logged) is taken as the same: the call stays skipped and is not
// reported. A skipped call that responded where the stored call of its key
// did not is kept aside before it returns (keepAnswersStep), and takes
// the stored row's place when a commit says the engine took it
// (audit.Results.Answered, completeAnswers); when keeping it fails, so
// does the append, and a retry keeps it.
func (s *Store) AppendCallsCompared(ctx context.Context, calls []audit.Record) (int, []int, []int, error) {
	n, held, differ, _, err := s.AppendCallsAnswered(ctx, calls)
	return n, held, differ, err
}

var _ audit.AnswerReporter = (*Store)(nil)

// AppendCallsAnswered is AppendCallsCompared that also returns, in order,
// the indexes of the held calls that may carry what the stored call of
// their key lacked (audit.AnswerReporter): those that answered where it
// had no answer (each completes it), and every answered held call whose
// stored call could not be read to compare (retention deleted it, or the
// wait or a read failed).
func (s *Store) AppendCallsAnswered(ctx context.Context, calls []audit.Record) (int, []int, []int, []int, error) {
	n, rows, skipped, err := s.appendCalls(ctx, calls, true)
	if err != nil {
		return n, nil, nil, nil, err
	}
	if len(skipped) == 0 {
		return n, nil, nil, nil, nil
	}
	if appendedHook != nil {
		appendedHook(ctx)
	}
	// The calls are stored: what follows (the comparison and the answers
	// kept aside) must finish once begun, whatever the request's sender
	// does. An exporter that gives up on its request (the OTel SDK's 10 s
	// timeout) cancels its context; bound to it, the reads failed and
	// every answered copy was reported as completing its call with none
	// kept aside, or the keeping failed after the answers were kept: the
	// engine took answers the store never put in place, the calls stayed
	// unanswered for good (the outside pass live21's D3, 258 thegram calls;
	// TestAnswerAside_RequestCanceled). Each step is bounded on its own:
	// the wait for the call log by compareWait, the rest by the committer.
	ctx = context.WithoutCancel(ctx)
	differ, complete, completeAt, answered, err := s.differing(ctx, calls, rows, skipped)
	if err != nil {
		return n, nil, nil, nil, s.fail("read the answers kept aside", err)
	}
	if len(complete) > 0 {
		// The answered copies are kept aside before the append is
		// acknowledged: a sender told so does not send the answer again.
		// They take the stored rows' place when the engine takes them
		// (completeAnswers).
		req := &request{keep: complete}
		if _, err := s.submit(ctx, req); err != nil {
			return n, nil, nil, nil, s.fail("keep the answers of stored calls", err)
		}
		if len(req.keepDiffer) > 0 {
			// Another request kept another response of the call first.
			for _, j := range req.keepDiffer {
				differ = append(differ, completeAt[j])
			}
			slices.Sort(differ)
			answered = slices.DeleteFunc(answered, func(i int) bool { return slices.Contains(differ, i) })
		}
	}
	return n, skipped, differ, answered, nil
}

// appendedHook, when set, is called by AppendCallsAnswered with the
// request's context once its calls are stored, before their answers are
// compared and kept: a fault injection for tests, which cancel the
// request there (TestAnswerAside_RequestCanceled). Nil in production.
var appendedHook func(ctx context.Context)

// compareWait is the longest an append waits for the call log's drain
// before it compares the responses of calls sent again (ack "log"; at most
// log_wait).
const compareWait = 2 * time.Second

// differing returns, of the indexes skipped of calls (and of their rows),
// those of the calls whose response differs from the stored call's; the
// rows of the calls that answered where the stored call of their key
// has no response (each key once), to keep aside (keepAnswersStep) with their indexes; and the
// indexes, in order, of the answered calls that complete or may complete
// the stored one (their stored call could not be read).
func (s *Store) differing(ctx context.Context, calls []audit.Record, rows []callRow, skipped []int) (differ []int, complete []callRow, completeAt, answered []int, err error) {
	type known struct {
		i   int
		sum uint64
		ok  bool // the sum says enough to compare
	}
	var check []known
	for _, i := range skipped {
		// A call without a response neither differs nor completes: a
		// plain re-send of an unanswered call reads nothing.
		if c := calls[i].Call; c.Responded {
			sum, ok := store.StoredResponse(c)
			check = append(check, known{i, sum, ok})
		}
	}
	if len(check) == 0 {
		return nil, nil, nil, nil, nil
	}
	// unread: none of the stored calls could be read, so any answered
	// one may complete its stored call.
	unread := func() []int {
		out := make([]int, len(check))
		for j, k := range check {
			out[j] = k.i
		}
		return out
	}
	warn := func(err error) {
		s.opts.Logger.Warn("cannot compare the responses of calls sent again with the stored ones: they are skipped as stored, not counted as id collisions",
			"calls", len(check), "err", err)
	}
	// The stored calls are read once the call log is committed as far as
	// this append, but the acknowledgement waits for that no longer than
	// compareWait: the comparison only tells what the engine counts, and a
	// drain held up (a lock on the file) would otherwise hold every
	// request with a call sent again for log_wait, as long as an SDK
	// exporter's own timeout (10 s), whose retry, all calls sent again,
	// would wait as long again.
	wait := min(s.opts.LogWait, compareWait)
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := s.caughtUp(cctx, "compare responses"); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the call log is not committed as far as these calls after %s: %w", wait, audit.ErrUnavailable)
		}
		warn(err)
		return nil, nil, nil, unread(), nil
	}
	// The stored call of each key: read through the id index (a few
	// statements for the whole batch) or, without it, one probe of
	// calls_key per key.
	type storedRow struct {
		t    int64
		blob []byte
	}
	stored := make(map[callKey]*storedRow, len(check))
	packed := make([]any, 0, len(check))
	for _, k := range check {
		key := keyOf(&rows[k.i])
		if _, dup := stored[key]; !dup {
			stored[key] = nil
			packed = append(packed, rows[k.i].id)
		}
	}
	take := func(id any, tenant string, t int64, blob []byte) {
		key := callKey{ms: milliOf(t), tenant: tenant, id: string(idBytes(id))}
		if row, ok := stored[key]; ok && row == nil {
			stored[key] = &storedRow{t, blob}
		}
	}
	if err := readStored(ctx, s, packed, stored, true, take); err != nil {
		warn(err)
		return nil, nil, nil, unread(), nil
	}
	var completing map[callKey]known // made at the first: completions are rare
	var buf []byte
	for _, k := range check {
		key := keyOf(&rows[k.i])
		row := stored[key]
		if row == nil {
			answered = append(answered, k.i)
			continue // deleted since (retention)
		}
		var rec audit.Record
		var err error
		if buf, err = decodeCall(buf, rows[k.i].id, row.t, row.blob, &rec); err != nil {
			warn(err)
			answered = append(answered, k.i)
			continue
		}
		if !rec.Call.Responded {
			// The answer of a call stored without one: the first answered
			// copy is kept aside (keepAnswersStep) until the engine takes
			// it; a later one, in the same request or a later one, is
			// compared with that one, as it would be with a stored answer
			// (reviews rev15b and late18: a second answer with another
			// response is an id collision, not a second first answer).
			first, ok := completing[key]
			if !ok {
				if completing == nil {
					completing = map[callKey]known{}
				}
				aside, err := s.answerAside(ctx, &rows[k.i])
				if err != nil {
					return nil, nil, nil, nil, err
				}
				if aside != nil {
					sum, ok := store.StoredResponse(aside.Call)
					completing[key] = known{i: -1, sum: sum, ok: ok}
					if ok && k.ok && sum != k.sum {
						differ = append(differ, k.i)
					}
					continue
				}
				completing[key] = k
				complete = append(complete, rows[k.i])
				completeAt = append(completeAt, k.i)
				answered = append(answered, k.i)
			} else if first.ok && k.ok && first.sum != k.sum {
				differ = append(differ, k.i)
			}
			continue
		}
		if sum, ok := store.StoredResponse(rec.Call); ok && k.ok && sum != k.sum {
			differ = append(differ, k.i)
		}
	}
	return differ, complete, completeAt, answered, nil
}

// readStored has take given the id, tenant, time and, with blobs, the blob
// (else nil) of the stored calls of the keys of want, whose ids are packed
// (and maybe of other calls of those ids: take filters them by key). The
// id index names the rows of their ids through its mark (each checked by
// take: an entry may be stale), and the rows past the mark are read by
// rid; without the index each key is looked up in calls_key.
func readStored[V any](ctx context.Context, s *Store, packed []any, want map[callKey]V, blobs bool, take func(id any, tenant string, t int64, blob []byte)) error {
	if s.opts.Calls == CallsLog {
		return s.readStoredLog(ctx, slices.Collect(maps.Keys(want)), blobs, take)
	}
	read := func(query string, args ...any) error {
		r, err := s.r.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		for r.Next() {
			var id any
			var tenant string
			var t int64
			var blob []byte
			if err := r.Scan(&id, &tenant, &t, &blob); err != nil {
				return err
			}
			take(id, tenant, t, blob)
		}
		return r.Err()
	}
	sel := `SELECT c.id, coalesce(t.s, ''), c.time, NULL FROM calls c LEFT JOIN strs t ON t.id = c.tenant WHERE `
	if blobs {
		sel = `SELECT c.id, coalesce(t.s, ''), c.time, c.rec FROM calls c LEFT JOIN strs t ON t.id = c.tenant WHERE `
	}
	mark := int64(-1)
	var rids []int64
	if s.ids != nil {
		var err error
		if rids, mark, err = s.ids.lookup(packed); err != nil {
			rids, mark = nil, -1
		}
	}
	if mark < 0 {
		// No index: one probe of calls_key per key.
		stmt, err := s.r.PrepareContext(ctx, sel+callsKey+` = ? AND c.tenant = coalesce((SELECT id FROM strs WHERE s = ?), 0) AND c.id = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for k := range want {
			var id any
			var tenant string
			var t int64
			var blob []byte
			err := stmt.QueryRowContext(ctx, k.ms, k.tenant, packedOf(k.id)).Scan(&id, &tenant, &t, &blob)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			take(id, tenant, t, blob)
		}
		return nil
	}
	for lo := 0; lo < len(rids); lo += 500 {
		part := rids[lo:min(lo+500, len(rids))]
		args := make([]any, len(part))
		for j, rid := range part {
			args[j] = rid
		}
		if err := read(sel+`c.rid IN (`+marks(len(args))+`)`, args...); err != nil {
			return err
		}
	}
	for lo := 0; lo < len(packed); lo += 500 {
		part := packed[lo:min(lo+500, len(packed))]
		if err := read(sel+`c.rid > ? AND c.id IN (`+marks(len(part))+`)`, append([]any{mark}, part...)...); err != nil {
			return err
		}
	}
	return nil
}

// packedOf is the stored form of an id from its idBytes.
func packedOf(b string) any {
	if len(b) > 0 && b[0] == 'b' {
		return []byte(b[1:])
	}
	return b[1:]
}
