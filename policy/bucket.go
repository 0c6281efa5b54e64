package policy

import (
	"crypto/sha256"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

const (
	// DefaultMaxKeys is how many distinct keys (token buckets) a rate_limit rule keeps when its
	// RateLimit.MaxKeys is 0. The key usually comes from the request (a client address, a
	// session id), so without a bound a flood of distinct keys would grow the map until the
	// appliance runs out of memory. At about 200 bytes per bucket (measured with short keys, map
	// overhead included) the default costs ~2 MiB per rule at most.
	DefaultMaxKeys = 10_000

	// MaxMaxKeys is the largest RateLimit.MaxKeys Compile accepts: ~2 GiB of buckets for one rule.
	MaxMaxKeys = 10_000_000

	// A store of at least shardedFrom keys is split so that goroutines evaluating different keys
	// rarely wait on each other; a smaller one is a single exact LRU.
	numShards   = 16
	shardedFrom = 1024

	// Keys longer than this are replaced by their SHA-256, so that a header value of several KiB
	// used as a key cannot multiply the memory bound by its length.
	maxKeyLen = 128
)

// bucket is a token bucket and, at the same time, a node of its shard's LRU list: the list gives
// O(1) eviction of the least recently used bucket when the shard is full.
type bucket struct {
	key        string
	tokens     float64
	last       time.Time
	prev, next *bucket
}

type shard struct {
	mu         sync.Mutex
	m          map[string]*bucket
	head, tail *bucket // head: most recently used
	capacity   int
}

// bucketStore holds the buckets of one rate_limit rule. Each rule has its own store, so keys
// metered by one rule can never evict the buckets of another. A reload hands the store of a rule
// that kept its name and key expression to the new Set (see CompileWithState): the old and the
// new Set then meter the same buckets, and no copy is needed.
type bucketStore struct {
	seed   maphash.Seed
	shards []shard // length fixed at creation: 1 or numShards
}

func newBucketStore(maxKeys int) *bucketStore {
	n := 1
	if maxKeys >= shardedFrom {
		n = numShards
	}
	st := &bucketStore{seed: maphash.MakeSeed(), shards: make([]shard, n)}
	for i := range st.shards {
		st.shards[i].m = make(map[string]*bucket)
	}
	st.resize(maxKeys)
	return st
}

// resize sets the bound, evicting least recently used buckets when it shrinks. The bound is
// rounded up to a multiple of the number of shards.
func (st *bucketStore) resize(maxKeys int) {
	n := len(st.shards)
	per := max((maxKeys+n-1)/n, 1)
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		sh.capacity = per
		for len(sh.m) > sh.capacity {
			b := sh.tail
			sh.unlink(b)
			delete(sh.m, b.key)
		}
		sh.mu.Unlock()
	}
}

func (st *bucketStore) len() int {
	n := 0
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// take removes one token from the bucket of key, creating it full if it does not exist. When
// the bucket is empty it returns false and how long until one token is available.
func (st *bucketStore) take(key string, now time.Time, rate float64, burst int) (bool, time.Duration) {
	if len(key) > maxKeyLen {
		sum := sha256.Sum256([]byte(key))
		// The NUL prefix keeps a hashed key from colliding with a short key of the same bytes.
		key = "\x00" + string(sum[:])
	}
	sh := &st.shards[0]
	if len(st.shards) > 1 {
		sh = &st.shards[maphash.String(st.seed, key)%uint64(len(st.shards))]
	}

	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[key]
	if ok {
		sh.moveToFront(b)
	} else {
		if len(sh.m) >= sh.capacity && sh.tail != nil {
			// Reuse the evicted node: at the bound, a flood of new keys allocates nothing.
			b = sh.tail
			sh.unlink(b)
			delete(sh.m, b.key)
			*b = bucket{}
		} else {
			b = new(bucket)
		}
		b.key = key
		b.tokens = float64(burst)
		b.last = now
		sh.m[key] = b
		sh.pushFront(b)
	}
	return b.take(now, rate, float64(burst))
}

// tokenEpsilon absorbs float rounding so that a bucket refilled for exactly one token's time
// (e.g. 100ms at 10/s) is not judged a hair short of one token.
const tokenEpsilon = 1e-9

func (b *bucket) take(now time.Time, rate, burst float64) (bool, time.Duration) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens += d.Seconds() * rate
		b.last = now
	}
	// Also applies when a reload lowered the burst of a carried-over bucket.
	if b.tokens > burst {
		b.tokens = burst
	}
	if b.tokens >= 1-tokenEpsilon {
		b.tokens--
		return true, 0
	}
	wait := math.Ceil((1 - b.tokens) / rate * float64(time.Second))
	if wait >= math.MaxInt64 || math.IsNaN(wait) {
		return false, time.Duration(math.MaxInt64)
	}
	return false, time.Duration(wait)
}

func (sh *shard) unlink(b *bucket) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		sh.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		sh.tail = b.prev
	}
	b.prev, b.next = nil, nil
}

func (sh *shard) pushFront(b *bucket) {
	b.prev = nil
	b.next = sh.head
	if sh.head != nil {
		sh.head.prev = b
	}
	sh.head = b
	if sh.tail == nil {
		sh.tail = b
	}
}

func (sh *shard) moveToFront(b *bucket) {
	if sh.head == b {
		return
	}
	sh.unlink(b)
	sh.pushFront(b)
}
