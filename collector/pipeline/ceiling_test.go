package pipeline_test

import "time"

// hangCeiling bounds the tests' waits for what the pipeline does on its
// own goroutines (a state file saved, an engine tick, ids forgotten): they
// poll and go on as soon as it is done, so the bound only catches a hang.
// It was 5 s, which a machine at load 30-50 can spend before a goroutine
// runs (flk23's sweep).
const hangCeiling = time.Minute
