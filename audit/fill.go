package audit

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
)

// The active segment is kept zero-filled ahead of its records: a sync of
// bytes written over zeros that are already on disk changes neither the
// file's size nor its extents, so fdatasync writes only the data (about half
// the latency of a sync that grows the file; preallocation with fallocate
// leaves unwritten extents and gains nothing). A filler goroutine writes the
// zeros in pieces, each with its own fdatasync, so the writer's syncs never
// carry more than a piece of them.
const (
	fillPiece = 128 << 10 // zeros written and synced at a time
	fillAhead = 2 << 20   // how far past the writer's end the filler keeps zeros
)

var zeroPiece = make([]byte, fillPiece)

// fillReserve is the free space the filler leaves on the file system: the
// padding must not take the last of it, which checkpoints and saved torn
// lines need (and records, once the padding is used up). A variable for tests.
var fillReserve int64 = 4 << 20

// filler keeps the active segment zero-filled ahead of the writer. The
// writer and the filler never write the same bytes: the filler writes only
// from end on, one piece at a time, and the writer writes below end, or,
// when it catches up, moves end past its own write while no piece is under
// way (reserve).
type filler struct {
	f     *os.File
	name  string
	limit int64 // the filler writes no zeros past it (the segment's rotation size)
	log   *slog.Logger

	mu     sync.Mutex
	wake   *sync.Cond // the filler waits on it for work
	idle   *sync.Cond // the writer waits on it for a piece to end
	end    int64      // bytes before end are records or synced zeros; the filler writes from end on
	busy   bool       // a piece from end is under way
	want   int64      // the writer's end: the filler keeps end >= want+fillAhead
	held   bool       // the writer owns everything past end (cutting back, closing)
	stop   bool
	err    error // why the last piece failed; nil after a success
	retry  bool  // try again after a failure (set by the store's once-a-second tick)
	done   chan struct{}
	pieces int // pieces written, for tests
}

// startFiller starts the filler of the segment the writer has open as f. The filler writes and
// syncs through a descriptor of its own: Linux reports a failed writeback once per open file
// description, so a sync of the filler's that flushed the writer's records and met an error must
// not consume the error the writer's own fdatasync has to see (it would then return success for
// records that are not on disk). If that descriptor cannot be opened, the filler fills nothing
// and says why (Ready stays fine; records then grow the file, which is correct, only slower).
func startFiller(f *os.File, name string, end, limit int64, log *slog.Logger) *filler {
	fl := &filler{name: name, end: end, want: end, limit: limit, log: log, done: make(chan struct{})}
	fl.wake = sync.NewCond(&fl.mu)
	fl.idle = sync.NewCond(&fl.mu)
	own, err := os.OpenFile(f.Name(), os.O_WRONLY, 0)
	if err != nil {
		log.Warn("audit segment cannot be zero-filled ahead: no descriptor of its own", "segment", name, "err", err)
		fl.err = err
		close(fl.done)
		fl.stop = true
		return fl
	}
	fl.f = own
	go fl.run()
	return fl
}

func (fl *filler) run() {
	defer close(fl.done)
	defer fl.f.Close()
	for {
		fl.mu.Lock()
		for !fl.stop && (fl.held || fl.end >= fl.want+fillAhead || fl.end >= fl.limit || fl.err != nil && !fl.retry) {
			fl.wake.Wait()
		}
		if fl.stop {
			fl.mu.Unlock()
			return
		}
		start := fl.end
		n := min(fillPiece, fl.limit-start)
		fl.busy = true
		fl.mu.Unlock()

		free, err := freeBytes(fl.f)
		if err == nil && free-n < fillReserve {
			err = fmt.Errorf("%d bytes free on the file system, and the zero-filling keeps %d free: %w", free, fillReserve, syscall.ENOSPC)
		}
		if err == nil {
			_, err = fl.f.WriteAt(zeroPiece[:n], start)
		}
		if err == nil {
			err = fdatasync(fl.f)
		}

		fl.mu.Lock()
		fl.busy = false
		if err == nil {
			// end may not have moved: only the filler moves it while busy.
			fl.end = start + n
			fl.pieces++
			if fl.err != nil {
				fl.log.Info("audit segment is zero-filled ahead again", "segment", fl.name)
			}
			fl.err = nil
		} else {
			if fl.err == nil {
				fl.log.Warn("audit segment cannot be zero-filled ahead; records are written until the zero-filled part is used up, then fail",
					"segment", fl.name, "zero_filled_ahead", max(fl.end-fl.want, 0), "err", err)
			}
			fl.err, fl.retry = err, false
		}
		fl.idle.Broadcast()
		fl.mu.Unlock()
	}
}

// reserve is called by the writer before it writes bytes up to end. It
// waits for a piece under way that end reaches into, and, when end is past
// the zeros, moves the filler's end past it, so the filler continues after
// the write. It reports whether the write lies inside the zeros, and the
// filler's last failure.
func (fl *filler) reserve(end int64) (inside bool, fillErr error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	for fl.busy && end > fl.end {
		fl.idle.Wait()
	}
	fl.want = max(fl.want, end)
	inside = end <= fl.end
	if !inside {
		fl.end = end
	}
	if fl.end < fl.want+fillAhead && fl.end < fl.limit {
		fl.wake.Signal()
	}
	return inside, fl.err
}

// hold waits for a piece under way to end and keeps the filler from starting
// another until release: the writer then owns everything past end.
func (fl *filler) hold() {
	fl.mu.Lock()
	for fl.busy {
		fl.idle.Wait()
	}
	fl.held = true
	fl.mu.Unlock()
}

// release ends a hold; the file now holds records or zeros up to end, and
// nothing the filler relies on past it.
func (fl *filler) release(end, want int64) {
	fl.mu.Lock()
	fl.held = false
	fl.end, fl.want = end, want
	fl.wake.Signal()
	fl.mu.Unlock()
}

// kick lets a filler that failed try again.
func (fl *filler) kick() {
	fl.mu.Lock()
	if fl.err != nil {
		fl.retry = true
		fl.wake.Signal()
	}
	fl.mu.Unlock()
}

// close stops the filler and waits for it.
func (fl *filler) close() {
	fl.mu.Lock()
	fl.stop = true
	fl.wake.Signal()
	fl.mu.Unlock()
	<-fl.done
}
