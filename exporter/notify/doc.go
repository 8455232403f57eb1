// Package notify sends one notification per new finding: an
// Alertmanager-compatible POST (the body of /api/v2/alerts) or a generic
// webhook (the finding's JSON). It is an audit.Sink with its own goroutine
// and queue, so it never blocks the detector; it retries with backoff, and
// keeps a journal of what it queued and sent so that a restart neither
// repeats a notification nor forgets a queued one.
package notify
