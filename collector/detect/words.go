package detect

import (
	"sync"

	"github.com/mcpaudit/mcpaudit/audit"
)

// word is a write's state, reason or retry action as a small number: the
// ledger keeps one of each for every write, and the words come from a
// short list (the contract's). A word outside it is added to the list for
// the life of the process; past 255 distinct words, further ones are kept
// as the last (a bound no reading of the contract's servers comes near).
type word uint8

// vocab numbers the words of one kind; 0 is "".
type vocab[T ~string] struct {
	mu    sync.RWMutex
	words []T
	index map[T]word
}

func newVocab[T ~string](known ...T) *vocab[T] {
	v := &vocab[T]{words: []T{""}, index: map[T]word{"": 0}}
	for _, w := range known {
		v.of(w)
	}
	return v
}

// of returns the number of w.
func (v *vocab[T]) of(w T) word {
	v.mu.RLock()
	n, ok := v.index[w]
	v.mu.RUnlock()
	if ok {
		return n
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n, ok := v.index[w]; ok {
		return n
	}
	if len(v.words) > 255 {
		return 255
	}
	n = word(len(v.words))
	v.words = append(v.words, w)
	v.index[w] = n
	return n
}

// word returns the word numbered n.
func (v *vocab[T]) word(n word) T {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.words[n]
}

var (
	stateWords = newVocab(audit.StatePending, audit.StateDurable, audit.StateResolved, audit.StateRejected,
		audit.StateUnverified, audit.StateDoubleApplied)
	reasonWords = newVocab(audit.ReasonCommitUnknown, audit.ReasonNoResponse, audit.ReasonStorageError,
		audit.ReasonSyncNotConfirmed, audit.ReasonInFlightUnknown, audit.ReasonNotWriteConfirmed, audit.ReasonSaveBlocked)
	actionWords = newVocab(audit.ActionNone, audit.ActionFixInput, audit.ActionRefreshAndRetry, audit.ActionRereadAndRebase,
		audit.ActionReplaySameRequest, audit.ActionVerifyThenDecide, audit.ActionWaitThenRetry, audit.ActionReauthorize,
		audit.ActionNewPlan, audit.ActionSplitWork, audit.ActionEscalate, audit.ActionUnknown)
)

// State numbers, for the comparisons the rules make.
var (
	wPending       = stateWords.of(audit.StatePending)
	wDurable       = stateWords.of(audit.StateDurable)
	wResolved      = stateWords.of(audit.StateResolved)
	wRejected      = stateWords.of(audit.StateRejected)
	wUnverified    = stateWords.of(audit.StateUnverified)
	wDoubleApplied = stateWords.of(audit.StateDoubleApplied)
)

// Reasons the rules look at.
var (
	rSyncNotConfirmed = reasonWords.of(audit.ReasonSyncNotConfirmed)
	rSaveBlocked      = reasonWords.of(audit.ReasonSaveBlocked)
	rNoResponse       = reasonWords.of(audit.ReasonNoResponse)
	rNotConfirmed     = reasonWords.of(audit.ReasonNotWriteConfirmed)
)
