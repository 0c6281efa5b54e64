package policy

import (
	"crypto/sha256"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxBuckets bounds how many token buckets are kept at once, over all rules. The key
	// usually comes from the request (a client address, a session id), so without a bound a flood
	// of distinct keys would grow the map until the appliance runs out of memory. At about 200
	// bytes per bucket (measured with short keys, map overhead included) the default costs
	// ~20 MiB at most.
	DefaultMaxBuckets = 100_000

	// The store is split so that goroutines evaluating different keys rarely wait on each other.
	numShards = 16

	// Keys longer than this are replaced by their SHA-256, so that a header value of several KiB
	// used as a key cannot multiply the memory bound by its length.
	maxKeyLen = 128
)

type bucketKey struct {
	rule uint64 // ruleID: survives a reload only when the rule's name and key expression do
	key  string
}

// bucket is a token bucket and, at the same time, a node of its shard's LRU list: the list gives
// O(1) eviction of the least recently used bucket when the shard is full.
type bucket struct {
	k          bucketKey
	tokens     float64
	last       time.Time
	prev, next *bucket
}

type shard struct {
	mu         sync.Mutex
	m          map[bucketKey]*bucket
	head, tail *bucket // head: most recently used
	capacity   int
}

// bucketStore holds the buckets of every rate-limit rule of a Set. A reload shares it with the
// new Set, so buckets of unchanged rules keep their budget and no copy is needed.
type bucketStore struct {
	seed   maphash.Seed
	nextID atomic.Uint64
	shards [numShards]shard
}

func newBucketStore(maxBuckets int) *bucketStore {
	st := &bucketStore{seed: maphash.MakeSeed()}
	for i := range st.shards {
		st.shards[i].m = make(map[bucketKey]*bucket)
	}
	st.resize(maxBuckets)
	return st
}

func (st *bucketStore) newRuleID() uint64 { return st.nextID.Add(1) }

// resize sets the bound, evicting least recently used buckets when it shrinks.
func (st *bucketStore) resize(maxBuckets int) {
	if maxBuckets < numShards {
		maxBuckets = numShards
	}
	per := (maxBuckets + numShards - 1) / numShards
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		sh.capacity = per
		for len(sh.m) > sh.capacity {
			b := sh.tail
			sh.unlink(b)
			delete(sh.m, b.k)
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

// take removes one token from the bucket of (rule, key), creating it full if it does not exist.
// When the bucket is empty it returns false and how long until one token is available.
func (st *bucketStore) take(rule uint64, key string, now time.Time, rate float64, burst int) (bool, time.Duration) {
	if len(key) > maxKeyLen {
		sum := sha256.Sum256([]byte(key))
		// The NUL prefix keeps a hashed key from colliding with a short key of the same bytes.
		key = "\x00" + string(sum[:])
	}
	k := bucketKey{rule: rule, key: key}
	h := maphash.String(st.seed, key) ^ (rule * 0x9E3779B97F4A7C15)
	sh := &st.shards[h%numShards]

	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[k]
	if ok {
		sh.moveToFront(b)
	} else {
		if len(sh.m) >= sh.capacity && sh.tail != nil {
			// Reuse the evicted node: at the bound, a flood of new keys allocates nothing.
			b = sh.tail
			sh.unlink(b)
			delete(sh.m, b.k)
			*b = bucket{}
		} else {
			b = new(bucket)
		}
		b.k = k
		b.tokens = float64(burst)
		b.last = now
		sh.m[k] = b
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
