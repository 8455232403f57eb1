package classify

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/mcpaudit/mcpaudit/audit"
)

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var codeRe = regexp.MustCompile("^(E_[A-Z_]+|[A-Z]+(_[A-Z]+)+|-32[0-9]{3})$")

// TestThegramReferenceCodes fails when a code named in the Thegram reference
// has no rule.
func TestThegramReferenceCodes(t *testing.T) {
	doc := readDoc(t, "thegram-mcp-errors-and-write-recovery.md")
	n := 0
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc, -1) {
		code := strings.TrimPrefix(m[1], "JSON-RPC ")
		if !codeRe.MatchString(code) {
			continue
		}
		n++
		if code == "-32000" {
			// -32000 carries its Thegram code in data.code.
			code = RPC(-32000, "E_APP_NOT_RUNNING")
		}
		if Action(code) == audit.ActionUnknown {
			t.Errorf("Thegram code %s has no rule", code)
		}
		if !KnownCode(code) {
			t.Errorf("Thegram code %s is not a known code", code)
		}
	}
	if n < 25 {
		t.Fatalf("found only %d codes in the reference: the extraction is broken", n)
	}
	// Every row of the table of exact messages classifies.
	rows := regexp.MustCompile("(?m)^\\| [^|]+ \\| `([A-Z_]+|JSON-RPC -32603)` \\| `([^`]*)` \\|").FindAllStringSubmatch(doc, -1)
	if len(rows) < 30 {
		t.Fatalf("found only %d message rows", len(rows))
	}
	for _, r := range rows {
		code := Thegram(strings.TrimPrefix(r[1], "JSON-RPC "), r[2])
		if Action(code) == audit.ActionUnknown {
			t.Errorf("%s %q has no rule", r[1], r[2])
		}
	}
}

// TestOddlynewReferenceMessages checks that every error message, receipt
// value and ledger outcome the Oddlynew reference names is in its text and
// classifies to the action findings.md §1 gives it.
func TestOddlynewReferenceMessages(t *testing.T) {
	doc := readDoc(t, "oddlynew-errors-receipts-and-safe-retries.md")
	f := func(phrase string, code string, want audit.RetryAction) {
		t.Helper()
		if !strings.Contains(doc, phrase) {
			t.Errorf("the reference does not name %q", phrase)
		}
		if code == "" {
			code = Oddlynew(phrase)
		}
		if got := Action(code); got != want {
			t.Errorf("%q: code %s action %s, want %s", phrase, code, got, want)
		}
	}
	f("stale_live_revision", "", audit.ActionRereadAndRebase)
	f("Invalid document writeBasis. Call getDocument without a version and pass the returned writeBasis unchanged.", "", audit.ActionFixInput)
	f("invalid_write_basis", "", audit.ActionFixInput)
	f("Execution timed out", "", audit.ActionVerifyThenDecide)
	f("Codemode executor timed out after 30000 ms", "", audit.ActionVerifyThenDecide)
	f("Codemode provider call budget exceeded: 65 calls, limit 64 calls per run.", "", audit.ActionSplitWork)
	f("Existing document creation identity has incompatible input.", "", audit.ActionFixInput)
	f("Unknown parameter. Accepted parameters:", "", audit.ActionFixInput)
	f("journal_corrupt", "", audit.ActionEscalate)
	f("document_size_limit", "", audit.ActionSplitWork)
	f("in_flight_unknown", CodeInFlightUnknown, audit.ActionVerifyThenDecide)
	f("wait_then_retry_apply", CodeCopyWaitThenRetryApply, audit.ActionWaitThenRetry)
	f("retry_apply", CodeCopyRetryApply, audit.ActionReplaySameRequest)
	f("create_new_plan", CodeCopyCreateNewPlan, audit.ActionNewPlan)
	f("blocked", CodeCopyBlocked, audit.ActionNewPlan)
	f("expired", CodeCopyExpired, audit.ActionNewPlan)
	f("applying", CodeCopyApplying, audit.ActionWaitThenRetry)
}

// TestFindingsTable checks every code listed in findings.md §1 against the
// action of its row.
func TestFindingsTable(t *testing.T) {
	doc := readDoc(t, "findings.md")
	doc = doc[strings.Index(doc, "## 1."):strings.Index(doc, "## 2.")]
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|[^|]+\\|(.*)\\|$").FindAllStringSubmatch(doc, -1)
	if len(rows) != len(audit.RetryActions) {
		t.Fatalf("found %d rows, want %d", len(rows), len(audit.RetryActions))
	}
	n := 0
	for _, r := range rows {
		want := audit.RetryAction(r[1])
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(r[2], -1) {
			code := m[1]
			switch {
			case code == "STALE_REVISION" && want == audit.ActionVerifyThenDecide:
				code = Thegram(code, "Create target already exists")
			case code == "-32603":
			case !codeRe.MatchString(code):
				code = Oddlynew(code)
				if code == CodeRunFailed {
					continue // a field name such as nextAction: retry_apply, checked above
				}
			}
			n++
			if got := Action(code); got != want {
				t.Errorf("%s: action %s, findings.md says %s", m[1], got, want)
			}
		}
	}
	if n < 30 {
		t.Fatalf("checked only %d codes", n)
	}
}

func TestOddlynew(t *testing.T) {
	f := func(msg, want string) {
		t.Helper()
		if got := Oddlynew(msg); got != want {
			t.Errorf("Oddlynew(%q) = %s, want %s", msg, got, want)
		}
	}
	f("Execution timed out\n\nSee the calls ledger.", CodeExecutionTimedOut)
	f("Codemode executor timed out after 30000 ms", CodeExecutorTimedOut)
	f("Unknown parameter 'documentID'. Did you mean documentId? Signature: editDocument({...})", CodeUnknownParameter)
	f("documents.editDocumnet is not a function", CodeUnknownMethod)
	f("Missing required parameter documentId. Signature: ...", CodeMissingParameter)
	f("A planToken that does not match the operation; read the receipt and retry with the recorded token", CodePlanTokenMismatch)
	f("copyId was already used for another copy", CodeCopyIDReused)
	f("Arguments exceed 512 KiB", CodeOversizedArguments)
	f("something else entirely", CodeRunFailed)
	f("", CodeRunFailed)
}

func TestTransport(t *testing.T) {
	f := func(in, want string) {
		t.Helper()
		if got := Transport(in); got != want {
			t.Errorf("Transport(%q) = %s, want %s", in, got, want)
		}
	}
	f("timeout", CodeTimeout)
	f("connection_reset", CodeConnectionReset)
	f("canceled", CodeCanceled)
	f("", CodeNoResponse)
	f("tls handshake failure", CodeTransport)
	f("not_sent", CodeNotSent)
	f("connection_refused", CodeTransport)
	f("ECONNREFUSED", CodeTransport)
	f("connection refused", CodeTransport)
	f("http_400", "http_400")
	f("HTTP_429 ", "http_429")
	// An upstream's 5xx keeps its status: "transport_error" read as a
	// broken connection in `mcpaudit calls` (prox17). Uncertain all the
	// same (TestNotApplied).
	f("http_502", "http_502")
	f("http_500", "http_500")
	f("HTTP_599", "http_599")
	f("http_5xx", CodeTransport)
	f("http_600", CodeTransport)
	f("http_4xx", CodeTransport)
	f("http_4000", CodeTransport)
}

// TestNotApplied: a transport error that proves the call never ran is not
// uncertain and has an action of its own; one that proves nothing stays
// uncertain.
func TestNotApplied(t *testing.T) {
	f := func(transportError string, notApplied bool, want audit.RetryAction) {
		t.Helper()
		code := Transport(transportError)
		if NotApplied(code) != notApplied || Uncertain(code) == notApplied {
			t.Errorf("%s (code %s): not applied %v, uncertain %v", transportError, code, NotApplied(code), Uncertain(code))
		}
		if got := Action(code); notApplied && got != want {
			t.Errorf("%s: action %s, want %s", transportError, got, want)
		}
		if !KnownCode(code) {
			t.Errorf("%s: code %s is not a label value", transportError, code)
		}
	}
	f("not_sent", true, audit.ActionWaitThenRetry)
	f("connection_refused", false, "")
	f("http_400", true, audit.ActionFixInput)
	f("http_404", true, audit.ActionFixInput)
	f("http_401", true, audit.ActionReauthorize)
	f("http_403", true, audit.ActionReauthorize)
	f("http_429", true, audit.ActionWaitThenRetry)
	f("http_413", true, audit.ActionSplitWork)
	f("http_502", false, "")
	f("http_503", false, "")
	f("http_504", false, "")
	f("connection_reset", false, "")
	f("timeout", false, "")
	f("canceled", false, "")
	f("", false, "")
}

func TestUnknownCode(t *testing.T) {
	if Action("E_SOMETHING_NEW") != audit.ActionUnknown || KnownCode("E_SOMETHING_NEW") {
		t.Fatal("unknown codes must map to unknown and not be label values")
	}
}
