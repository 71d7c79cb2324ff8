package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// A stream's [DONE] is best sent in the same write as the end of the
// chunked body. A client that stops reading at [DONE], as openai-go does,
// then has the whole response and keeps its connection for the next call;
// one that reads to the end does not wait for a second write. Flushing
// [DONE] from the handler sends it alone, and net/http writes the end of
// the body only after the handler returns. So, on a server that serves
// through DeliveryListener with DeliveryContext, the gateway writes [DONE]
// without flushing, returns, and learns from the connection whether the
// write that carried it succeeded: a stream counts only when it did
// (SPEC §6.3). Elsewhere (another server, HTTP/2) it flushes [DONE] itself.

// DeliveryListener wraps ln so that the gateway can tell whether a
// response's last write reached each connection it accepts. It is meant
// for a plain TCP listener (gyre serve terminates no TLS itself): net/http
// knows a TLS connection, for HTTP/2 and Request.TLS, only by its type,
// which the wrapper hides.
func DeliveryListener(ln net.Listener) net.Listener { return deliveryListener{ln} }

// DeliveryContext is an http.Server's ConnContext for connections from a
// DeliveryListener.
func DeliveryContext(ctx context.Context, c net.Conn) context.Context {
	if dc, ok := c.(*deliveryConn); ok {
		return context.WithValue(ctx, deliveryKey{}, dc)
	}
	return ctx
}

type deliveryKey struct{}

type deliveryListener struct{ net.Listener }

func (l deliveryListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &deliveryConn{Conn: c}, nil
}

// deliveryConn reports the outcome of the next write on a connection to
// whoever asked for it.
type deliveryConn struct {
	net.Conn
	next atomic.Pointer[func(error)]
}

// afterNextWrite arranges for report to be called once, with the result
// of the connection's next write, or with net.ErrClosed if the connection
// closes before one. It replaces any report not yet made.
func (c *deliveryConn) afterNextWrite(report func(error)) { c.next.Store(&report) }

func (c *deliveryConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.wrote(err)
	return n, err
}

// ReadFrom keeps net/http's sendfile path for file bodies, which it takes
// only when the connection is an io.ReaderFrom.
func (c *deliveryConn) ReadFrom(r io.Reader) (int64, error) {
	var (
		n   int64
		err error
	)
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(struct{ io.Writer }{c.Conn}, r)
	}
	c.wrote(err)
	return n, err
}

// wrote makes the report asked for, if any, of a write that ended in err.
func (c *deliveryConn) wrote(err error) {
	if c.next.Load() != nil {
		if report := c.next.Swap(nil); report != nil {
			(*report)(err)
		}
	}
}

func (c *deliveryConn) Close() error {
	err := c.Conn.Close()
	if report := c.next.Swap(nil); report != nil {
		(*report)(net.ErrClosed)
	}
	return err
}

// CloseWrite keeps net/http's half-close before it closes a connection.
func (c *deliveryConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// AfterResponse runs f once the response to r is complete, if the gateway
// left the response's last write to net/http, after the handler returns,
// and reports whether it did. Otherwise the response is complete already
// (or will be by the time the handler returns), and f is not called. The
// API server ends its access log, metrics and span this way, so that
// writing them does not hold back a stream's [DONE].
func AfterResponse(r *http.Request, f func()) bool {
	dc := deliveryOf(r)
	return dc != nil && dc.alsoAfterNextWrite(f)
}

// alsoAfterNextWrite runs f after the report asked for with afterNextWrite,
// if one is pending, and reports whether one was.
func (c *deliveryConn) alsoAfterNextWrite(f func()) bool {
	prev := c.next.Load()
	if prev == nil {
		return false
	}
	report := func(err error) {
		(*prev)(err)
		f()
	}
	return c.next.CompareAndSwap(prev, &report)
}

// deliveryOf returns r's connection when the end of its response can be
// watched: HTTP/1.x, served through a DeliveryListener.
func deliveryOf(r *http.Request) *deliveryConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	dc, _ := r.Context().Value(deliveryKey{}).(*deliveryConn)
	return dc
}
