package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"sync"
	"syscall"
)

// multipartBody is the multipart form of a POST /runs (SPEC §7.2): a
// payload part, then one part per fixture in payload order. Its length is
// known before it is sent — the framing is built up front and fixture
// sizes are known — so the request carries a Content-Length: harnesses
// behind servers that cannot read a chunked body (Python's http.server,
// several WSGI setups) read an empty one otherwise. The fixtures' bytes
// are streamed, one open file at a time, never buffered.
type multipartBody struct {
	ctx         context.Context
	contentType string
	// segments[i] is the framing before files[i]; the last one closes the
	// form.
	segments [][]byte
	files    []Fixture
	size     int64

	// Pieces alternate: segments[0], files[0], segments[1], …, the last
	// segment; k is the next piece.
	// mu guards what follows: the transport may close the body while
	// another of its goroutines reads it.
	mu   sync.Mutex
	k    int
	cur  io.Reader
	file io.ReadCloser // the fixture being read, or nil
	fi   int           // its index in files
	left int64         // bytes of it still expected
	sent int64
}

// newMultipartBody frames payload and files.
func newMultipartBody(ctx context.Context, payload []byte, files []Fixture) (*multipartBody, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	b := &multipartBody{ctx: ctx, contentType: mw.FormDataContentType(), files: files}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="payload"`)
	h.Set("Content-Type", "application/json")
	w, err := mw.CreatePart(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(payload); err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Size < 0 {
			return nil, fmt.Errorf("fixture %s has no size", f.Name)
		}
		fh := textproto.MIMEHeader{}
		fh.Set("Content-Disposition", `form-data; name="files"; filename="`+f.Name+`"`)
		fh.Set("Content-Type", "application/octet-stream")
		if _, err := mw.CreatePart(fh); err != nil {
			return nil, err
		}
		b.segments = append(b.segments, bytes.Clone(buf.Bytes()))
		buf.Reset()
		b.size += f.Size
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	b.segments = append(b.segments, bytes.Clone(buf.Bytes()))
	for _, s := range b.segments {
		b.size += int64(len(s))
	}
	return b, nil
}

// Read streams the framing and the fixtures in order. A fixture that
// yields more or fewer bytes than its size is an error: it changed since
// the suite was loaded.
func (b *multipartBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.cur == nil {
			if err := b.next(); err != nil {
				return 0, err
			}
		}
		n, err := b.cur.Read(p)
		b.sent += int64(n)
		if b.file == nil {
			if errors.Is(err, io.EOF) {
				b.cur = nil
				err = nil
				if n == 0 {
					continue
				}
			}
			return n, err
		}
		b.left -= int64(n)
		switch {
		case b.left < 0:
			return n, b.changed()
		case errors.Is(err, io.EOF):
			if b.left != 0 {
				return n, b.changed()
			}
			cerr := b.file.Close()
			b.file, b.cur = nil, nil
			if cerr != nil {
				return n, fmt.Errorf("read fixture %s: %w", b.files[b.fi].Name, cerr)
			}
			if n == 0 {
				continue
			}
			return n, nil
		case err != nil:
			return n, fmt.Errorf("read fixture %s: %w", b.files[b.fi].Name, err)
		}
		return n, nil
	}
}

// next opens the next piece; io.EOF after the last.
func (b *multipartBody) next() error {
	k := b.k
	if k >= len(b.segments)+len(b.files) {
		return io.EOF
	}
	b.k++
	if k%2 == 0 {
		b.cur = bytes.NewReader(b.segments[k/2])
		return nil
	}
	b.fi = k / 2
	f := b.files[b.fi]
	rc, err := f.Open(b.ctx)
	if err != nil {
		return fmt.Errorf("open fixture %s: %w", f.Name, err)
	}
	b.file, b.cur, b.left = rc, rc, f.Size
	return nil
}

func (b *multipartBody) changed() error {
	f := b.files[b.fi]
	return fmt.Errorf("fixture %s changed since the suite was loaded: it is no longer %d bytes", f.Name, f.Size)
}

// Close closes the fixture being read, if any.
func (b *multipartBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cur, b.k = nil, len(b.segments)+len(b.files)
	if b.file == nil {
		return nil
	}
	err := b.file.Close()
	b.file = nil
	return err
}

// explain says what happened when the harness answered a multipart
// request with a transport error: most often a server that closed the
// connection without reading the body.
func (b *multipartBody) explain(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("the harness closed the connection without answering the multipart request (Content-Length %d, %d bytes sent): %w", b.size, b.sent, err)
	}
	return fmt.Errorf("multipart request of %d bytes (Content-Length), %d sent: %w", b.size, b.sent, err)
}
