package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"
)

// RotatingFile is the flow log's file: appended to, rotated by size and reopened on request. It
// is written by one goroutine only (the FlowLog writer), which is also the one that rotates and
// reopens it, so a rotation always falls between two lines and never splits one, even when one
// Write carries a batch of lines.
//
// Size rotation (MaxSize > 0): before a write that would take the file past MaxSize, PATH.N-1 is
// renamed to PATH.N, …, PATH to PATH.1 (PATH.N, the oldest, is replaced; N = MaxFiles), and a
// new PATH is created. At most MaxFiles rotated files are kept beside the live one, so the log
// never holds more than (MaxFiles+1) × MaxSize bytes (a single line longer than MaxSize is still
// written whole, alone in its file).
//
// Reopen closes PATH and opens it again (creating it): after an external tool such as logrotate
// renamed the file, the lines written up to the reopen are in the renamed file, the rest in the
// new one, and none is lost.
type RotatingFile struct {
	path     string
	maxSize  int64
	maxFiles int
	f        *os.File
	size     int64
	log      *slog.Logger
	// failedAt is the last failed (re)open: while the file is gone, writes retry the open at most
	// once per retryOpen instead of on every line. rotateFailedAt is the same for the renames.
	failedAt       time.Time
	rotateFailedAt time.Time
	// special: PATH is not a regular file (/dev/null, a FIFO, a terminal): it is never rotated,
	// since renaming it would replace a device with a plain file.
	special bool
}

// retryOpen spaces the attempts to open a file that could not be opened, or to rotate a file that
// could not be rotated.
const retryOpen = time.Second

// flowLogMode is the mode of a new flow log file (the umask applies).
const flowLogMode = 0o640

// OpenRotatingFile opens (creating it, appending to it) the file at path. maxSize 0 never
// rotates by size (rotation is left to logrotate and Reopen); otherwise maxFiles (≥ 1) rotated
// files are kept. A rotation that fails is logged to log (nil: discarded) and retried later; the
// lines keep going to the live file meanwhile.
func OpenRotatingFile(path string, maxSize int64, maxFiles int, log *slog.Logger) (*RotatingFile, error) {
	if maxSize < 0 || maxSize > 0 && maxFiles < 1 {
		return nil, fmt.Errorf("flow log %s: invalid rotation: max size %d, max files %d", path, maxSize, maxFiles)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &RotatingFile{path: path, maxSize: maxSize, maxFiles: maxFiles, log: log}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

// Path is the live file's path.
func (r *RotatingFile) Path() string { return r.path }

func (r *RotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, flowLogMode)
	if err != nil {
		r.failedAt = time.Now()
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		r.failedAt = time.Now()
		return err
	}
	r.f, r.size, r.failedAt = f, st.Size(), time.Time{}
	r.special = !st.Mode().IsRegular()
	return nil
}

// errNotOpen is what a write returns while the file could not be reopened.
var errNotOpen = errors.New("file is not open")

// Write writes p, one or more whole lines, at the end of the file. When p would take the file
// past the maximum size, the lines that fit are written, then the file rotates before the next
// one: a rotation falls between two lines, and every file but a line longer than the limit stays
// within it, however many lines one Write carries.
func (r *RotatingFile) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if r.f == nil {
			if time.Since(r.failedAt) < retryOpen {
				return written, errNotOpen
			}
			if err := r.open(); err != nil {
				return written, err
			}
		}
		chunk := p
		if r.maxSize > 0 && !r.special && r.size+int64(len(p)) > r.maxSize {
			chunk = r.fit(p)
			if len(chunk) == 0 && time.Since(r.rotateFailedAt) >= retryOpen {
				if err := r.rotateOrLog(); err != nil {
					return written, err
				}
				continue
			}
			if len(chunk) == 0 {
				// The rotation failed a moment ago: the lines go to the live file rather than
				// being lost, and the rotation is retried a second later.
				chunk = p
			}
		}
		n, err := r.f.Write(chunk)
		r.size += int64(n)
		written += n
		p = p[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// fit is the longest run of whole lines at the start of p that the file has room for. An empty
// file always takes p's first line: a line longer than the limit is written whole, alone.
func (r *RotatingFile) fit(p []byte) []byte {
	room := r.maxSize - r.size
	end := 0
	for end < len(p) {
		next := len(p)
		if i := bytes.IndexByte(p[end:], '\n'); i >= 0 {
			next = end + i + 1
		}
		if int64(next) > room {
			if end == 0 && r.size == 0 {
				return p[:next]
			}
			break
		}
		end = next
	}
	return p[:end]
}

// rotateOrLog rotates the file. It fails only when no file is open afterwards (the next write
// retries); when just the renames failed, it logs that once, the live file stays open and the
// lines keep going to it.
func (r *RotatingFile) rotateOrLog() error {
	err := r.rotate()
	switch {
	case err != nil && r.f == nil:
		return err
	case err != nil:
		if r.rotateFailedAt.IsZero() {
			r.log.Error("flow log: rotation failed; writing on to the live file and retrying", "file", r.path, "err", err)
		}
		r.rotateFailedAt = time.Now()
	case !r.rotateFailedAt.IsZero():
		r.log.Info("flow log: rotation works again", "file", r.path)
		r.rotateFailedAt = time.Time{}
	}
	return nil
}

// rotate shifts PATH.i to PATH.i+1 (dropping the oldest) and PATH to PATH.1, then opens a new
// PATH. The live file is renamed while still open (its last line is complete), then closed.
func (r *RotatingFile) rotate() error {
	// Only the files up to the first missing one need to move (there is room there); when
	// PATH.1 … PATH.N all exist, PATH.N is the one replaced.
	top := r.maxFiles
	for i := 1; i < r.maxFiles; i++ {
		if _, err := os.Lstat(r.name(i)); errors.Is(err, os.ErrNotExist) {
			top = i
			break
		}
	}
	for i := top - 1; i >= 1; i-- {
		err := os.Rename(r.name(i), r.name(i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(r.path, r.name(1)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	r.f.Close()
	r.f = nil
	return r.open()
}

func (r *RotatingFile) name(i int) string { return r.path + "." + strconv.Itoa(i) }

// Reopen closes the file and opens PATH again, as logrotate's postrotate asks (SIGUSR1).
func (r *RotatingFile) Reopen() error {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
	return r.open()
}

// Close closes the file.
func (r *RotatingFile) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
