package audit

import (
	"os"
	"path/filepath"
	"time"
)

// retain deletes the oldest whole segments beyond RetainSegments or older
// than RetainAge. Only a prefix of the log goes, never the active segment,
// so what remains is one unbroken chain whose first prev is the hash of the
// last record deleted.
//
// Before a file goes, a checkpoint naming the new start (the first seq kept
// and that hash) is signed and made durable: checkpoints commit to the log
// from their start, so records are removed only once a signed statement says
// they may be, and a log missing older records than its latest checkpoint's
// start fails verify and is refused by Open.
func (s *Store) retain() {
	if s.cfg.RetainSegments <= 0 && s.cfg.RetainAge <= 0 {
		return
	}
	segs, err := listSegments(s.cfg.Dir)
	if err != nil {
		s.log.Warn("audit retention skipped", "err", err)
		return
	}
	s.state.Lock()
	start := s.start.seq
	s.state.Unlock()
	if len(segs) > 0 && segs[0].first > start {
		// Records this store still commits to are gone, and not by its
		// hand: moving the start past them would sign their removal.
		s.log.Error("audit records were removed outside retention; retention stops until the log is examined (run audit verify)",
			"missing_from", start, "missing_to", segs[0].first-1)
		return
	}
	var gone []segment
	var kept *segment
	for i, seg := range segs {
		if seg.name == s.w.name || !s.expired(seg, len(segs)-i) {
			kept = &segs[i]
			break
		}
		gone = append(gone, seg)
	}
	if len(gone) == 0 || kept == nil {
		return
	}
	st, err := s.baseAt(*kept)
	if err != nil {
		s.log.Warn("audit retention skipped", "err", err)
		return
	}
	s.state.Lock()
	if st.seq > s.start.seq {
		s.start = st
	}
	s.state.Unlock()
	if err := s.checkpoint(); err != nil {
		s.log.Warn("audit retention postponed: the checkpoint naming the new start is not written", "err", err)
		return
	}
	s.state.Lock()
	signed := s.cpStart.seq
	s.state.Unlock()
	removed := 0
	for i, seg := range gone {
		next := kept.first
		if i+1 < len(gone) {
			next = gone[i+1].first
		}
		if next > signed {
			break // it holds records the persisted checkpoint still commits to
		}
		if err := os.Remove(filepath.Join(s.cfg.Dir, seg.name)); err != nil {
			s.log.Warn("audit retention stopped", "segment", seg.name, "err", err)
			break
		}
		removed++
		s.log.Info("audit segment removed by retention", "segment", seg.name)
	}
	if removed > 0 {
		if err := syncDir(s.cfg.Dir); err != nil {
			s.log.Warn("audit retention not synced", "err", err)
		}
	}
}

// baseAt is the start of a log that begins with seg: its first seq and the
// hash of the record before, which seg's first record names as prev (or the
// head, when seg is the active segment and still empty).
func (s *Store) baseAt(seg segment) (base, error) {
	if seg.first == s.w.dhead.seq+1 {
		return base{seq: seg.first, anchor: s.w.dhead.hash}, nil
	}
	anchor, err := firstPrev(filepath.Join(s.cfg.Dir, seg.name))
	if err != nil {
		return base{}, err
	}
	return base{seq: seg.first, anchor: anchor}, nil
}

// expired reports whether seg goes, remaining being the count of segments
// from it to the newest.
func (s *Store) expired(seg segment, remaining int) bool {
	if s.cfg.RetainSegments > 0 && remaining > s.cfg.RetainSegments {
		return true
	}
	if s.cfg.RetainAge <= 0 {
		return false
	}
	fi, err := os.Stat(filepath.Join(s.cfg.Dir, seg.name))
	return err == nil && time.Since(fi.ModTime()) > s.cfg.RetainAge
}
