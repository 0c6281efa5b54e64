package audit

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gowebpki/jcs"
	"golang.org/x/mod/sumdb/note"
)

// maxBatch bounds one group commit so a flood cannot grow a single write
// without limit.
const maxBatch = 4096

// outcomeDelay is how long an outcome record may wait to share the next authorization's sync.
// Nothing is forwarded on an outcome's account, so it need not cost a sync of its own: under load
// it rides with the next commit, and alone it is committed after this delay (its Append returns
// then). A crash inside the window loses only outcomes, which verify reads as calls whose end is
// unknown, never as tampering.
const outcomeDelay = 20 * time.Millisecond

// Store is an open audit log. Its methods are safe for concurrent use.
type Store struct {
	cfg    Config
	log    *slog.Logger
	signer note.Signer
	vkey   string

	reqs chan *request
	// mu makes Close wait for Appends that are handing a request over, so
	// everything sent before Close is committed before the writer stops.
	mu         sync.RWMutex
	closed     bool
	stop       chan struct{}
	writerDone chan struct{}
	cpStop     chan struct{}
	cpDone     chan struct{}
	cpMu       sync.Mutex // serializes checkpoint writers (the loop, Close)

	state   sync.Mutex // guards the fields below, read by other goroutines
	current head       // the durable head
	lastErr error      // why the store is not ready; nil when it is
	cp      []byte     // the latest signed checkpoint
	cpHead  head       // what the latest persisted checkpoint covers
	start   base       // where the log begins, as the checkpoints state it
	cpStart base       // the start the latest persisted checkpoint names

	w writer // owned by the writer goroutine (and by Open and Close outside it)

	// The pipeline, owned by the writer goroutine: batches written and not
	// yet durable, oldest first, and whether the syncer is running a sync.
	pending    []*written
	pendingBuf []*written
	encoded    []*written // batches encoded into w.buf, not yet written
	syncing    bool
	syncReqs   chan syncReq
	syncDone   chan syncRes
	syncerDone chan struct{}

	// beforeSync, when set by a test, runs in the writer before each sync;
	// an error it returns fails the sync.
	beforeSync func() error
	// afterBatch, when set by a test, runs in the writer after each batch
	// it takes (encodes, and writes unless a sync is under way).
	afterBatch func()
}

type request struct {
	rec   *Record // points to own
	own   Record
	args  []byte // own.Arguments, when they were canonical already
	done  chan result
	timer *time.Timer
}

// requests recycles a request, its channel and its timer once its Append has
// received the result: nothing else refers to it then. A request whose
// Append gave up (timeout, ctx) is left to the garbage collector, since the
// writer may still answer it.
var requests = sync.Pool{New: func() any { return &request{done: make(chan result, 1)} }}

func getRequest(timeout time.Duration) *request {
	req := requests.Get().(*request)
	req.rec = &req.own
	if req.timer == nil {
		req.timer = time.NewTimer(timeout)
	} else {
		req.timer.Reset(timeout)
	}
	return req
}

func putRequest(req *request) {
	req.timer.Stop()
	req.own = Record{}
	if cap(req.args) > 64<<10 {
		req.args = nil // a rare large one is not kept
	}
	requests.Put(req)
}

type result struct {
	receipt Receipt
	rec     *Record
	err     error
}

// writer is the state of the active segment.
type writer struct {
	f        *os.File
	fill     *filler // keeps f zero-filled ahead of durable
	name     string
	durable  int64 // size of the active segment that is known durable
	written  int64 // size of the active segment written (durable or not)
	dirty    bool  // bytes past durable may remain from a failed write
	head     head  // the chain's head after the last record written
	dhead    head  // the chain's head after the last durable record
	buf      []byte
	failSize int // size of the last failed write, for the probe
	ticks    int
}

// Open opens the store in cfg.Dir, creating the directory (0700) and the
// signing key on first use, recovering the chain's head from the newest
// segment and cutting off an incomplete final line a crash left (it was
// never acknowledged; it is saved beside the segment). It refuses a log its
// own signed checkpoint shows was cut, at the end or at the start.
func Open(cfg Config, log *slog.Logger) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("open audit store: no directory")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	signer, vkey, err := loadOrCreateKey(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	s := &Store{
		cfg: cfg, log: log, signer: signer, vkey: vkey,
		reqs:       make(chan *request, maxBatch),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		cpStop:     make(chan struct{}),
		cpDone:     make(chan struct{}),
		syncReqs:   make(chan syncReq, 1),
		syncDone:   make(chan syncRes, 1),
		syncerDone: make(chan struct{}),
		pendingBuf: make([]*written, 0, 64),
	}
	s.pending = s.pendingBuf
	cp, msg := s.latestCheckpoint()
	if err := s.recover(cp); err != nil {
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	st, err := s.chooseStart(cp)
	if err != nil {
		s.closeSegment(false)
		return nil, fmt.Errorf("open audit store: %w", err)
	}
	s.start = st
	if cp != nil {
		s.cp, s.cpHead, s.cpStart = msg, head{seq: cp.Size, hash: cp.Head}, base{seq: cp.Start, anchor: cp.Anchor}
	}
	s.current = s.w.head
	if err := s.checkpoint(); err != nil {
		s.log.Warn("audit checkpoint not written", "err", err)
	}
	go s.syncer()
	go s.run()
	go s.checkpointLoop()
	return s, nil
}

// latestCheckpoint returns the newest checkpoint this store signed that is
// still on the box: of the checkpoint file and the last note of
// checkpoints.log (so deleting one of them is not enough), the one with the
// most records and, among those, the latest start. Notes that do not verify
// are skipped; nil when none does. Only the last note is read: the log grows
// by one a second, and verify reads all of them anyway.
func (s *Store) latestCheckpoint() (*Checkpoint, []byte) {
	var best *Checkpoint
	var bestMsg []byte
	consider := func(what string, msg []byte) {
		cp, err := OpenCheckpoint(msg, s.vkey)
		if err != nil {
			s.log.Warn("audit checkpoint does not verify; ignored", "checkpoint", what, "err", err)
			return
		}
		if best == nil || cp.Size > best.Size || cp.Size == best.Size && cp.from() > best.from() {
			best, bestMsg = &cp, msg
		}
	}
	if data, err := os.ReadFile(filepath.Join(s.cfg.Dir, checkpointFile)); err == nil {
		consider(checkpointFile, data)
	}
	if msg, err := lastNote(filepath.Join(s.cfg.Dir, checkpointsLog)); err == nil && msg != nil {
		consider("last note of "+checkpointsLog, msg)
	}
	return best, bestMsg
}

// lastNote returns the last note of checkpoints.log, nil when there is none.
// Each note there is "<text>\n\n<signatures>\n" followed by one more
// newline, so the last one begins after the blank line before its own.
func lastNote(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	const window = 16 << 10 // a note is a few hundred bytes
	off := max(fi.Size()-window, 0)
	data := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(data, off); err != nil {
		return nil, err
	}
	return lastNoteIn(data, off > 0), nil
}

// lastNoteIn returns the last note of data, the end of checkpoints.log;
// partial says data may begin inside a note.
func lastNoteIn(data []byte, partial bool) []byte {
	data = bytes.TrimSuffix(data, []byte("\n"))
	sep := bytes.LastIndex(data, []byte("\n\n"))
	if sep < 0 {
		return nil
	}
	begin := bytes.LastIndex(data[:sep], []byte("\n\n"))
	switch {
	case begin >= 0:
		begin += 2
	case partial:
		return nil // a note longer than the window: not one this store wrote
	default:
		begin = 0 // the only note
	}
	return data[begin:]
}

// recover finds the head in the newest segment that holds a record. It
// checks the log against cp before it changes anything: a log shorter than
// the checkpoint it signed had records removed, and truncating a torn line
// or appending would bury the evidence, so it refuses and leaves every file
// as it is. A torn final line no checkpoint covers was never acknowledged
// (Append returns after the sync that makes its newline durable): it is
// saved beside the segment and cut off.
func (s *Store) recover(cp *Checkpoint) error {
	segs, err := listSegments(s.cfg.Dir)
	if err != nil {
		return err
	}
	var empty []segment // newest segments holding no record, to remove
	var found *segment
	var t tail
	torn := "" // the segment ending in an incomplete line, if one does
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		t, err = readTail(filepath.Join(s.cfg.Dir, seg.name), seg.first)
		if err != nil {
			return err
		}
		if (t.torn > 0 || t.stray > 0) && torn == "" {
			torn = seg.name
		}
		if t.records == 0 {
			// Only the newest can be empty: rotation creates a segment with
			// its first write, which a crash may have torn.
			empty = append(empty, seg)
			continue
		}
		found = &segs[i]
		break
	}
	h := t.head
	if found == nil {
		h = head{}
		if cp != nil && cp.Start == cp.Size+1 {
			// Retention removed every record (the segment after them was
			// created but never written): the checkpoint holds the head.
			h = head{seq: cp.Size, hash: cp.Head}
		}
	}
	if cp != nil {
		if err := checkHead(cp, h, torn); err != nil {
			return err
		}
	}
	for _, seg := range empty {
		path := filepath.Join(s.cfg.Dir, seg.name)
		if err := s.saveTorn(path, 0, true); err != nil {
			return err
		}
		s.log.Warn("audit segment holds no record; removed", "segment", seg.name)
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove empty segment: %w", err)
		}
	}
	s.w.head, s.w.dhead = h, h
	if found == nil {
		return nil
	}
	path := filepath.Join(s.cfg.Dir, found.name)
	full := t.durable >= s.cfg.SegmentBytes
	if t.torn > 0 || t.stray > 0 {
		if err := s.saveTorn(path, t.durable, full); err != nil {
			return err
		}
	}
	if full {
		if t.size > t.durable {
			// A crash before rotation cut the padding off.
			if err := truncateSynced(path, t.durable); err != nil {
				return err
			}
		}
		return nil
	}
	return s.reopenSegment(found.name, t.durable)
}

// checkHead refuses a log whose head h falls short of the signed checkpoint
// cp, or differs from it at its count. torn names a segment that ends in an
// incomplete line ("" when none does).
func checkHead(cp *Checkpoint, h head, torn string) error {
	switch {
	case cp.Size > h.seq && torn != "":
		return fmt.Errorf("the last line of %s (after record %d) lacks its newline, but the signed checkpoint covers %d records: "+
			"an acknowledged record was cut, not torn by a crash (run audit verify; nothing was changed)", torn, h.seq, cp.Size)
	case cp.Size > h.seq:
		return fmt.Errorf("the log ends at record %d but its checkpoint covers %d: records were removed (run audit verify)", h.seq, cp.Size)
	case cp.Size == h.seq && cp.Head != h.hash:
		return fmt.Errorf("record %d does not match its checkpoint (run audit verify)", cp.Size)
	}
	return nil
}

// saveTorn keeps what follows the last complete record of the segment at
// path (an incomplete final line, and bytes other than NUL inside the
// padding: an unacknowledged write a crash tore) in a file beside it, which
// verify and query ignore, before it removes them, so that what recovery
// removes can still be looked at. It cuts the file at durable when cut is
// set, and otherwise overwrites those bytes with zeros, restoring the
// padding.
func (s *Store) saveTorn(path string, durable int64, cut bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read torn record: %w", err)
	}
	end := int64(len(bytes.TrimRight(data, "\x00")))
	if end <= durable {
		return nil
	}
	aside := fmt.Sprintf("%s.torn-%d", path, time.Now().UnixMilli())
	if err := writeAtomic(aside, data[durable:end], 0o600); err != nil {
		return fmt.Errorf("save torn record: %w", err)
	}
	s.log.Warn("audit segment ended in an incomplete write no checkpoint covers (never acknowledged); saved aside and removed",
		"segment", filepath.Base(path), "bytes", end-durable, "saved", filepath.Base(aside))
	if cut {
		return truncateSynced(path, durable)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("restore padding: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, end-durable), durable); err != nil {
		return fmt.Errorf("restore padding: %w", err)
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("restore padding: %w", err)
	}
	return nil
}

// truncateSynced cuts the file at path to size and makes that durable.
func truncateSynced(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	return nil
}

// chooseStart decides the base the store's checkpoints commit to, from the
// first segment left and the latest checkpoint cp. The store never signs a
// later start than its last checkpoint named unless its own retention moved
// it: a log whose oldest records went missing otherwise is refused, since
// signing its new start would vouch for the removal.
func (s *Store) chooseStart(cp *Checkpoint) (base, error) {
	segs, err := listSegments(s.cfg.Dir)
	if err != nil {
		return base{}, err
	}
	if len(segs) == 0 {
		if s.w.head.seq == 0 {
			return genesis, nil
		}
		return base{seq: cp.Start, anchor: cp.Anchor}, nil // all retained away; recover took the head from cp
	}
	first := segs[0].first
	switch {
	case cp == nil && first > 1:
		return base{}, fmt.Errorf("the log starts at record %d and no signed checkpoint names a start after record 1: "+
			"records 1 to %d were removed (run audit verify)", first, first-1)
	case cp == nil:
		// Open signs a checkpoint before the first record, so the
		// checkpoints were lost or deleted; nothing tells how long the log
		// was. A checkpoint kept off the box still does (audit verify).
		s.log.Warn("audit log has records but no checkpoint on the box verifies; continuing from the log as it is (run audit verify with a checkpoint kept off the box)")
		return genesis, nil
	case first == 1 && cp.Start <= 1:
		return genesis, nil
	case cp.Start == 0:
		// Written before checkpoints named their start: take the log's
		// first record as it is, once.
		anchor, err := firstPrev(filepath.Join(s.cfg.Dir, segs[0].name))
		if err != nil {
			return base{}, err
		}
		s.log.Warn("audit checkpoint names no start (an older version wrote it); the log's first record is taken as its start",
			"start", first)
		return base{seq: first, anchor: anchor}, nil
	case first > cp.Start:
		return base{}, fmt.Errorf("the log starts at record %d but the signed checkpoint commits to it from record %d: "+
			"records %d to %d were removed outside retention (run audit verify)", first, cp.Start, cp.Start, first-1)
	}
	return base{seq: cp.Start, anchor: cp.Anchor}, nil
}

// firstPrev returns the prev of the first record of the segment at path.
func firstPrev(path string) ([32]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return [32]byte{}, fmt.Errorf("read segment: %w", err)
	}
	defer f.Close()
	l, err := newLineReader(f).next()
	if err != nil {
		return [32]byte{}, fmt.Errorf("read %s: first record: %w", filepath.Base(path), err)
	}
	r, err := DecodeRecord(l.text)
	if err != nil {
		return [32]byte{}, fmt.Errorf("read %s line 1: %w (run audit verify)", filepath.Base(path), err)
	}
	return parseHash(r.Prev)
}

// reopenSegment continues the segment name whose records end at durable;
// what follows them is padding (recovery removed anything else).
func (s *Store) reopenSegment(name string, durable int64) error {
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, name), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open segment: %w", err)
	}
	s.w.f, s.w.name, s.w.durable, s.w.written = f, name, durable, durable
	s.w.fill = startFiller(f, name, max(fi.Size(), durable), s.cfg.SegmentBytes, s.log)
	return nil
}

// Append makes r durable and returns its receipt; r's Seq, Prev and Time are
// set on success. It fails with an error wrapping ErrUnavailable when the
// record is not durable within the configured timeout, the disk fails, ctx
// ends, or the store is closed.
func (s *Store) Append(ctx context.Context, r *Record) (Receipt, error) {
	req := getRequest(s.cfg.Timeout)
	var err error
	if req.args, err = prepareInto(&req.own, r, req.args); err != nil {
		putRequest(req)
		return Receipt{}, err
	}
	if err := s.send(ctx, req, req.timer.C); err != nil {
		putRequest(req) // never handed over
		return Receipt{}, err
	}
	select {
	case res := <-req.done:
		if res.err == nil {
			r.Seq, r.Prev, r.Time = res.rec.Seq, res.rec.Prev, res.rec.Time
		}
		putRequest(req)
		if res.err != nil {
			return Receipt{}, res.err
		}
		return res.receipt, nil
	case <-req.timer.C:
		return Receipt{}, s.timedOut()
	case <-ctx.Done():
		req.timer.Stop()
		return Receipt{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

func (s *Store) send(ctx context.Context, req *request, timeout <-chan time.Time) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	}
	select {
	case s.reqs <- req:
		return nil
	case <-timeout:
		return s.timedOut()
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
}

func (s *Store) timedOut() error {
	err := fmt.Errorf("%w: record not durable within %s", ErrUnavailable, s.cfg.Timeout)
	s.setErr(err)
	return err
}

// prepare copies r, so the caller may reuse it once Append returns whatever
// the writer still does, and canonicalizes its arguments.
func prepare(r *Record) (*Record, error) {
	rec := new(Record)
	if _, err := prepareInto(rec, r, nil); err != nil {
		return nil, err
	}
	return rec, nil
}

// prepareInto is prepare into dst; arguments already canonical are copied
// into buf (returned, grown as needed), which must stay untouched while
// dst is in use.
func prepareInto(dst, r *Record, buf []byte) ([]byte, error) {
	if r.Kind != KindAuthorization && r.Kind != KindOutcome {
		return buf, fmt.Errorf("audit record kind %q is neither %q nor %q", r.Kind, KindAuthorization, KindOutcome)
	}
	*dst = *r
	switch {
	case isCanonicalJSON(r.Arguments):
		// Already canonical (the usual case): copied, not re-encoded. The
		// copy keeps the caller free to reuse its buffer once Append returns.
		buf = append(buf[:0], r.Arguments...)
		dst.Arguments = buf
	case len(bytes.TrimSpace(r.Arguments)) > 0:
		canon, err := jcs.Transform(r.Arguments)
		if err != nil {
			return buf, fmt.Errorf("audit record arguments: %w", err)
		}
		dst.Arguments = canon
	default:
		dst.Arguments = nil
	}
	if len(dst.Arguments) > maxLine/2 {
		return buf, fmt.Errorf("audit record arguments of %d bytes exceed %d", len(dst.Arguments), maxLine/2)
	}
	return buf, nil
}

// Ready is nil when the store is open and its last write, or a later probe
// of the disk, succeeded.
func (s *Store) Ready() error {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	}
	s.state.Lock()
	defer s.state.Unlock()
	return s.lastErr
}

func (s *Store) setErr(err error) {
	s.state.Lock()
	if s.lastErr == nil {
		s.log.Error("audit store unavailable", "err", err)
	}
	s.lastErr = err
	s.state.Unlock()
}

func (s *Store) clearErr() {
	s.state.Lock()
	if s.lastErr != nil {
		s.log.Info("audit store available again")
	}
	s.lastErr = nil
	s.state.Unlock()
}

// Checkpoint returns the latest signed checkpoint (a C2SP signed note).
func (s *Store) Checkpoint() []byte {
	s.state.Lock()
	defer s.state.Unlock()
	return bytes.Clone(s.cp)
}

// PublicKey returns the note verifier key line that checks the checkpoints.
func (s *Store) PublicKey() string { return s.vkey }

// Close commits what was appended before it, writes a final checkpoint and
// closes the store; Append fails afterwards. ctx bounds the wait for the
// writer.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	close(s.cpStop)
	select {
	case <-s.writerDone:
	case <-ctx.Done():
		return fmt.Errorf("close audit store: %w", ctx.Err())
	}
	<-s.cpDone
	// The padding goes first, freeing its space for the checkpoint: a closed
	// log is plain lines, and the next Open zero-fills again in the
	// background.
	err := s.closeSegment(true)
	if cerr := s.checkpoint(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close audit store: %w", err)
	}
	return nil
}

// closeSegment stops the filler and closes the active segment, cutting its
// padding off when trim is set (on rotation and Close); the cut is synced.
func (s *Store) closeSegment(trim bool) error {
	w := &s.w
	if w.f == nil {
		return nil
	}
	var err error
	if w.fill != nil {
		w.fill.close()
		w.fill = nil
	}
	if trim {
		if err = w.f.Truncate(w.durable); err == nil {
			err = fdatasync(w.f)
		}
		if err != nil {
			err = fmt.Errorf("cut the padding off %s: %w", w.name, err)
		}
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

// run is the writer. It batches the requests waiting, encodes each batch
// and writes it after the segment's written end, and hands the sync to the
// syncer goroutine: while one fdatasync runs, the next batches are encoded
// and written, and the sync after it covers all of them. A batch is
// acknowledged only once a sync that began after its write succeeded; a
// failed write or sync fails every batch not yet durable and cuts the
// segment back to its durable end. It probes the disk while it is failing.
func (s *Store) run() {
	defer close(s.writerDone)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// later holds outcome records waiting for a commit to ride with (outcomeDelay).
	var later []*request
	delay := time.NewTimer(time.Hour)
	delay.Stop()
	for {
		select {
		case req := <-s.reqs:
			batch := s.gather(append(s.newBatch(), req))
			if onlyOutcomes(batch) && len(later)+len(batch) < maxBatch {
				if len(later) == 0 {
					delay.Reset(outcomeDelay)
				}
				later = append(later, batch...)
				continue
			}
			if len(later) > 0 {
				delay.Stop()
				batch = append(later, batch...)
				later = nil
			}
			s.write(batch)
		case res := <-s.syncDone:
			s.synced(res)
		case <-delay.C:
			if len(later) > 0 {
				s.write(later)
				later = nil
			}
		case <-tick.C:
			s.maintain()
		case <-s.stop:
			if len(later) > 0 {
				s.write(later)
			}
			for {
				select {
				case req := <-s.reqs:
					s.write(s.gather(append(s.newBatch(), req)))
					continue
				default:
				}
				break
			}
			s.drain()
			close(s.syncReqs)
			<-s.syncerDone
			return
		}
	}
}

func (s *Store) newBatch() []*request { return make([]*request, 0, 8) }

// onlyOutcomes reports whether no request of batch waits for its sync to forward a call.
func onlyOutcomes(batch []*request) bool {
	for _, r := range batch {
		if r.rec.Kind != KindOutcome {
			return false
		}
	}
	return true
}

func (s *Store) gather(batch []*request) []*request {
	for len(batch) < maxBatch {
		select {
		case req := <-s.reqs:
			batch = append(batch, req)
		default:
			return batch
		}
	}
	return batch
}

// written is a batch written to the active segment and not yet durable.
type written struct {
	reqs     []*request
	receipts []Receipt
	end      int64 // the segment's written end after it
	head     head  // the chain's head after it
}

// syncReq asks the syncer for an fdatasync of f covering the first n
// pending batches (those written before it is sent).
type syncReq struct {
	f *os.File
	n int
}

type syncRes struct {
	n   int
	err error
}

// syncer runs fdatasync for the writer, one at a time.
func (s *Store) syncer() {
	defer close(s.syncerDone)
	for req := range s.syncReqs {
		var err error
		if s.beforeSync != nil {
			err = s.beforeSync()
		}
		if err == nil {
			err = fdatasync(req.f)
		}
		s.syncDone <- syncRes{n: req.n, err: err}
	}
}

// flushBytes is how much encoded data waits for the sync under way to end
// before it is written anyway (it joins the next sync either way).
const flushBytes = 256 << 10

// write encodes batch after the records encoded before it. While no sync
// runs it is written and a sync started at once; while one runs, batches are
// encoded as they come and written together when it ends (or once
// flushBytes wait), so that one write and one sync cover all of them.
func (s *Store) write(batch []*request) {
	w := &s.w
	if w.f != nil && w.written+int64(len(w.buf)) >= s.cfg.SegmentBytes {
		// Rotation: the next segment's records may not become durable
		// before this one's are.
		s.flush()
		s.drain()
		if w.f != nil && w.written >= s.cfg.SegmentBytes {
			s.rotate()
		}
	}
	if len(s.encoded) == 0 && len(s.pending) == 0 {
		if err := s.prepareSegment(); err != nil {
			s.fail(batch, err)
			return
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	h := w.head
	b := &written{reqs: batch, receipts: make([]Receipt, len(batch))}
	var hexPrev [64]byte
	for i, req := range batch {
		hex.Encode(hexPrev[:], h.hash[:])
		req.rec.Seq, req.rec.Prev, req.rec.Time = h.seq+1, string(hexPrev[:]), now
		start := len(w.buf)
		w.buf = encodeRecord(w.buf, req.rec)
		h = head{seq: h.seq + 1, hash: lineHash(w.buf[start:])}
		w.buf = append(w.buf, '\n')
		b.receipts[i] = Receipt{Seq: h.seq, Hash: hex.EncodeToString(h.hash[:])}
	}
	w.head = h
	b.end, b.head = int64(len(w.buf)), h // end is relative to w.written until flushed
	s.encoded = append(s.encoded, b)
	if !s.syncing || len(w.buf) >= flushBytes {
		s.flush()
	}
	if s.afterBatch != nil {
		s.afterBatch()
	}
}

// flush writes the encoded batches after the segment's written end and
// makes sure a sync will cover them.
func (s *Store) flush() {
	w := &s.w
	if len(s.encoded) == 0 {
		return
	}
	inside, fillErr := w.fill.reserve(w.written + int64(len(w.buf)))
	if _, err := w.f.WriteAt(w.buf, w.written); err != nil {
		w.failSize = len(w.buf)
		if !inside && fillErr != nil {
			err = fmt.Errorf("write records past the zero-filled end of the segment, which cannot be extended (%v): %w", fillErr, err)
		} else {
			err = fmt.Errorf("write records: %w", err)
		}
		// The sync under way may still make earlier batches durable.
		if s.syncing {
			s.syncing = false
			if res := <-s.syncDone; res.err == nil {
				s.ack(res.n)
			}
		}
		s.failPending(err)
		return
	}
	for _, b := range s.encoded {
		b.end += w.written
	}
	s.pending = append(s.pending, s.encoded...)
	clear(s.encoded)
	s.encoded = s.encoded[:0]
	w.written += int64(len(w.buf))
	w.buf = w.buf[:0]
	if !s.syncing {
		s.startSync()
	}
}

func (s *Store) startSync() {
	s.syncing = true
	s.syncReqs <- syncReq{f: s.w.f, n: len(s.pending)}
}

// synced takes a sync's result: its batches are acknowledged, or every
// pending batch fails.
func (s *Store) synced(res syncRes) {
	s.syncing = false
	if res.err != nil {
		s.w.failSize = int(s.w.written - s.w.durable)
		s.failPending(fmt.Errorf("write records: %w", res.err))
		return
	}
	s.ack(res.n)
	s.flush()
	switch {
	case s.syncing:
	case len(s.pending) > 0:
		s.startSync()
	case s.w.f != nil && s.w.written >= s.cfg.SegmentBytes:
		s.rotate()
	}
}

// ack acknowledges the first n pending batches, which a sync made durable.
func (s *Store) ack(n int) {
	w := &s.w
	done := s.pending[:n]
	last := done[n-1]
	w.durable, w.dhead = last.end, last.head
	s.state.Lock()
	s.current = last.head
	s.state.Unlock()
	s.clearErr()
	for _, b := range done {
		for i, req := range b.reqs {
			req.done <- result{receipt: b.receipts[i], rec: req.rec}
		}
	}
	clear(done)
	s.pending = s.pending[n:]
	if len(s.pending) == 0 {
		s.pending = s.pendingBuf[:0]
	}
}

// drain waits until every batch is durable or failed.
func (s *Store) drain() {
	s.flush()
	for s.syncing {
		s.synced(<-s.syncDone)
	}
}

// failPending fails every batch not yet durable, written or only encoded
// (no sync is under way), and cuts the segment back to its durable end, so
// no unacknowledged bytes stay to be mistaken for records.
func (s *Store) failPending(cause error) {
	w := &s.w
	w.dirty = true
	w.head, w.written, w.buf = w.dhead, w.durable, w.buf[:0]
	s.cutBack()
	err := fmt.Errorf("%w: %w", ErrUnavailable, cause)
	s.setErr(err)
	for _, batches := range [][]*written{s.pending, s.encoded} {
		for _, b := range batches {
			for _, req := range b.reqs {
				req.done <- result{err: err}
			}
		}
		clear(batches)
	}
	s.pending, s.encoded = s.pendingBuf[:0], s.encoded[:0]
}

// rotate closes the full active segment (nothing is pending); the next
// write creates the next one.
func (s *Store) rotate() {
	if err := s.closeSegment(true); err != nil {
		s.log.Warn("audit segment close failed", "segment", s.w.name, "err", err)
	}
}

// cutBack truncates the active segment to its durable size; if even that
// fails, the next commit retries before writing.
//
// The padding past the durable end goes with it (it may hold part of the
// failed write); the filler zero-fills again from the durable end.
func (s *Store) cutBack() error {
	w := &s.w
	w.written = w.durable
	w.fill.hold()
	defer w.fill.release(w.durable, w.durable)
	if err := w.f.Truncate(w.durable); err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	if err := fdatasync(w.f); err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	w.dirty = false
	return nil
}

func (s *Store) fail(batch []*request, cause error) {
	err := fmt.Errorf("%w: %w", ErrUnavailable, cause)
	s.setErr(err)
	for _, req := range batch {
		req.done <- result{err: err}
	}
}

// prepareSegment makes sure there is an active segment with nothing past its
// durable end, creating the next one (named after its first seq) after a
// rotation.
func (s *Store) prepareSegment() error {
	w := &s.w
	if w.f != nil {
		if w.dirty {
			return s.cutBack()
		}
		return nil
	}
	name := segmentName(w.head.seq + 1)
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	if err := syncDir(s.cfg.Dir); err != nil {
		f.Close()
		os.Remove(filepath.Join(s.cfg.Dir, name))
		return err
	}
	w.f, w.name, w.durable, w.written, w.dirty = f, name, 0, 0, false
	w.fill = startFiller(f, name, 0, s.cfg.SegmentBytes, s.log)
	s.retain()
	return nil
}

// maintain runs once a second in the writer: a probe while the store is
// failing, so it becomes ready again by itself once space is freed, and the
// age-based retention.
func (s *Store) maintain() {
	s.w.ticks++
	if s.w.fill != nil {
		s.w.fill.kick()
	}
	if s.Ready() != nil && len(s.pending) == 0 {
		if err := s.probe(); err == nil {
			s.clearErr()
		}
	}
	if s.cfg.RetainAge > 0 && s.w.ticks%60 == 0 {
		s.retain()
	}
}

// probe writes and syncs as many bytes as the last failed write; a success
// means that write would now succeed too.
func (s *Store) probe() error {
	if s.w.dirty && s.w.f != nil {
		if err := s.cutBack(); err != nil {
			return err
		}
	}
	f, err := os.CreateTemp(s.cfg.Dir, ".probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, max(s.w.failSize, 4096))); err != nil {
		return err
	}
	return fdatasync(f)
}
