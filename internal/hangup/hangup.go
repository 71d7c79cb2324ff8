// Package hangup tells a client hanging up from a server failure. A
// request whose client closed the connection (a worker stopping during a
// long-poll claim, an agent cancelling a completion) ends its context;
// the store reads and upstream calls made under it then fail with
// context.Canceled. That is no error of the server's: it is logged at
// debug level and recorded as nginx's 499, never as an ERROR with code
// internal. The API server and the LLM gateway share this one predicate.
package hangup

import (
	"context"
	"errors"
)

// Status is nginx's status for a request whose client closed the
// connection before the answer: never sent, only recorded (access log,
// metrics, a gateway call's record).
const Status = 499

// ClientGone says err is ctx being cancelled, where ctx is the request's
// own context (or one derived from it): the client closed the connection.
// A cancellation while ctx is still live, or ctx's deadline passing, is
// the server's own trouble.
func ClientGone(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled)
}
