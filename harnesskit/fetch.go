package harnesskit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxFetchRedirects bounds the redirects one file url may take.
const maxFetchRedirects = 3

// newFetchClient returns the client file urls are fetched with: it follows
// at most maxFetchRedirects redirects, only to http or https, never from
// https down to http, and it sends no cookies.
func newFetchClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxFetchRedirects {
				return fmt.Errorf("more than %d redirects", maxFetchRedirects)
			}
			switch req.URL.Scheme {
			case "https":
			case "http":
				if via[len(via)-1].URL.Scheme == "https" {
					return errors.New("redirect from https to http refused")
				}
			default:
				return fmt.Errorf("redirect to scheme %q refused", req.URL.Scheme)
			}
			return nil
		},
	}
}

// fetchFiles delivers a run's files: the multipart uploads as they are, or
// each url fetched in turn, bounded by MaxFileBytes and FetchTimeout.
func (s *Server) fetchFiles(ctx context.Context, r *Run) ([]File, error) {
	if r.uploads != nil || len(r.refs) == 0 {
		return r.uploads, nil
	}
	files := make([]File, 0, len(r.refs))
	for _, ref := range r.refs {
		data, ct, err := s.fetch(ctx, deref(ref.URL))
		if err != nil {
			return nil, fmt.Errorf("fetch file %q: %w", ref.Name, err)
		}
		files = append(files, File{Name: ref.Name, Context: deref(ref.Context), URL: deref(ref.URL), ContentType: ct, Data: data})
	}
	return files, nil
}

// fetch reads one url, through FetchFile when set.
func (s *Server) fetch(ctx context.Context, rawURL string) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.FetchTimeout)
	defer cancel()
	var body io.ReadCloser
	var ct string
	if s.opts.FetchFile != nil {
		rc, err := s.opts.FetchFile(ctx, rawURL)
		if err != nil {
			return nil, "", err
		}
		body = rc
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := s.fetchClient.Do(req)
		if err != nil {
			return nil, "", redact(err)
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return nil, "", fmt.Errorf("the url answered %s", resp.Status)
		}
		if resp.ContentLength > s.opts.MaxFileBytes {
			_ = resp.Body.Close()
			return nil, "", fmt.Errorf("the file is over the limit of %d bytes", s.opts.MaxFileBytes)
		}
		body, ct = resp.Body, resp.Header.Get("Content-Type")
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, s.opts.MaxFileBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("read: %w", redact(err))
	}
	if int64(len(data)) > s.opts.MaxFileBytes {
		return nil, "", fmt.Errorf("the file is over the limit of %d bytes", s.opts.MaxFileBytes)
	}
	return data, ct, nil
}

// redact drops the url from a client error: a signed url's query is a
// credential, and the error text reaches RunStatus.error.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
