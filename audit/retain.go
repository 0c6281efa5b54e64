package audit

import (
	"os"
	"path/filepath"
	"time"
)

// retain deletes the oldest whole segments beyond RetainSegments or older
// than RetainAge. Only a prefix of the log goes, never the active segment,
// so what remains is one unbroken chain whose first prev is the hash of the
// last record deleted (which is what lets verify still check the checkpoint
// of that count).
func (s *Store) retain() {
	if s.cfg.RetainSegments <= 0 && s.cfg.RetainAge <= 0 {
		return
	}
	segs, err := listSegments(s.cfg.Dir)
	if err != nil {
		s.log.Warn("audit retention skipped", "err", err)
		return
	}
	removed := 0
	for i, seg := range segs {
		if seg.name == s.w.name || !s.expired(seg, len(segs)-i) {
			break
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
