package pipeline_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRestart_CrashBeforeAnswerNamed_NoStateFile (late18c) is
// TestRestart_CrashBeforeAnswerNamed with the state file gone at the
// restart: no mark says which calls were judged, so the store's watermark
// stands for every mark, and the answer of the call after it, kept aside
// and acknowledged, the process killed before a commit named it, is
// handed to the engine by the replay all the same.
func TestRestart_CrashBeforeAnswerNamed_NoStateFile(t *testing.T) {
	eachAckAndEnd(t, func(t *testing.T, ack string, crash bool) {
		answerNamedAfterRestart(t, ack, crash, func(dir string) {
			if err := os.Remove(filepath.Join(dir, "partitions.json")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		})
	})
}
