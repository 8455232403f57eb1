package clickhouse

import (
	"context"
	"errors"
	"fmt"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/mcpaudit/mcpaudit/audit"
)

// retryableCodes are the ClickHouse exception codes that say "not now"
// rather than "never": overload, timeouts, lost replicas, network errors
// reported by the server. Every other exception is permanent.
var retryableCodes = map[int32]bool{
	3:   true, // UNEXPECTED_END_OF_FILE
	32:  true, // ATTEMPT_TO_READ_AFTER_EOF
	159: true, // TIMEOUT_EXCEEDED
	202: true, // TOO_MANY_SIMULTANEOUS_QUERIES
	203: true, // NO_FREE_CONNECTION
	209: true, // SOCKET_TIMEOUT
	210: true, // NETWORK_ERROR
	236: true, // ABORTED
	241: true, // MEMORY_LIMIT_EXCEEDED
	242: true, // TABLE_IS_READ_ONLY
	252: true, // TOO_MANY_PARTS
	285: true, // TOO_FEW_LIVE_REPLICAS
	286: true, // UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE
	319: true, // UNKNOWN_STATUS_OF_INSERT
	394: true, // QUERY_WAS_CANCELLED
	425: true, // SYSTEM_ERROR
	999: true, // KEEPER_EXCEPTION
}

// retryable reports whether err may go away by itself: a connection or
// timeout error, or an exception with a retryable code.
func retryable(err error) bool {
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return retryableCodes[ex.Code]
	}
	// Anything else from the driver is the transport: refused, reset,
	// timed out, closed connections and pool timeouts.
	return true
}

// memoryLimited reports whether err is the server's refusal of a query
// for its memory limit (MEMORY_LIMIT_EXCEEDED).
func memoryLimited(err error) bool {
	var ex *ch.Exception
	return errors.As(err, &ex) && ex.Code == 241
}

// classify wraps err with audit.ErrUnavailable when it is retryable.
func classify(err error) error {
	if err == nil || errors.Is(err, audit.ErrUnavailable) || !retryable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
}

// queryErr wraps the error of a read: the caller's own cancellation as is,
// retryable errors with audit.ErrUnavailable.
func queryErr(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("cannot %s: %w", op, ctx.Err())
	}
	return classify(fmt.Errorf("cannot %s: %w", op, err))
}

// wrapQueryErr is queryErr for background work, which has no caller to
// cancel it.
func wrapQueryErr(op string, err error) error { return queryErr(context.Background(), op, err) }
