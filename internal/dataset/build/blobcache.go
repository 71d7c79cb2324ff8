package build

import (
	"bytes"
	"container/list"
	"context"
	"io"
	"sync"

	"github.com/gyrehq/gyre/internal/gateway"
)

// cacheBytes is the most a build's blob cache holds: enough for the
// system prompts, tool lists and shared history that recur across a
// dataset's rollouts, and the same whatever the size of the dataset.
const cacheBytes = 8 << 20

// blobCache is a gateway.BlobReader that keeps the blobs it has read, up
// to max bytes, evicting the least recently used first. Recorded bodies
// are content-addressed, so a key's bytes never change and a kept copy is
// never stale; a blob that could not be read (missing, or not hashing to
// its key) is not kept, so every reader of it gets the failure. One cache
// serves one build: a blob deleted after the build is missing for the
// next. It is safe for concurrent use.
type blobCache struct {
	blobs gateway.BlobReader
	max   int64

	mu   sync.Mutex
	size int64 // bytes of the kept blobs
	lru  *list.List
	keys map[string]*list.Element
}

type cached struct {
	key string
	b   []byte
}

func newBlobCache(blobs gateway.BlobReader, max int64) *blobCache {
	return &blobCache{blobs: blobs, max: max, lru: list.New(), keys: map[string]*list.Element{}}
}

// GetContent returns the blob at key, from the cache when it holds it.
// The bytes were checked against sha when first read.
func (c *blobCache) GetContent(ctx context.Context, key, sha string) (io.ReadCloser, error) {
	if b, ok := c.get(key); ok {
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	rc, err := c.blobs.GetContent(ctx, key, sha)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	c.put(key, b)
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (c *blobCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.keys[key]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cached).b, true
}

// put keeps b unless it alone would take more than a sixteenth of the
// cache, which would evict many small shared blobs for one that is
// rarely shared.
func (c *blobCache) put(key string, b []byte) {
	n := entrySize(key, b)
	if n > c.max/16 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[key]; ok {
		return // read at the same time by another reader
	}
	c.keys[key] = c.lru.PushFront(&cached{key: key, b: b})
	c.size += n
	for c.size > c.max {
		e := c.lru.Back()
		v := e.Value.(*cached)
		c.lru.Remove(e)
		delete(c.keys, v.key)
		c.size -= entrySize(v.key, v.b)
	}
}

// entrySize is what an entry counts against the cache: its bytes, its
// key and a round figure for the list element and map entry around them.
func entrySize(key string, b []byte) int64 { return int64(len(b) + len(key) + 128) }

// held reports how many blobs and bytes the cache holds.
func (c *blobCache) held() (n int, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.size
}
