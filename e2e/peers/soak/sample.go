//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// sample is the appliance's resident set and open file descriptors at one time.
type sample struct {
	at      time.Time
	segment int // which appliance process: 1, then 2 after the kill -9
	pid     int
	rssKiB  int64
	fds     int
}

func sampleProc(pid int) (sample, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return sample{}, false
	}
	smp := sample{pid: pid}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				smp.rssKiB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return sample{}, false
	}
	smp.fds = len(ents)
	return smp, true
}

// slope is the least-squares slope of ys over xs (per unit of x), and whether there were enough
// points (3) to say.
func slope(xs, ys []float64) (float64, bool) {
	n := float64(len(xs))
	if len(xs) < 3 {
		return 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, false
	}
	return (n*sxy - sx*sy) / d, true
}

// growth describes one appliance process's samples after from (its warm-up skipped): first and
// last RSS and fds, and their slopes per minute.
func growth(samples []sample, segment int, from time.Time) string {
	var xs, rss, fds []float64
	var first, last sample
	for _, s := range samples {
		if s.segment != segment || s.at.Before(from) {
			continue
		}
		if len(xs) == 0 {
			first = s
		}
		last = s
		xs = append(xs, s.at.Sub(from).Minutes())
		rss = append(rss, float64(s.rssKiB))
		fds = append(fds, float64(s.fds))
	}
	rs, ok1 := slope(xs, rss)
	fs, ok2 := slope(xs, fds)
	if !ok1 || !ok2 {
		return fmt.Sprintf("%d sample(s) after warm-up: too few for a slope", len(xs))
	}
	return fmt.Sprintf("pid %d, %d samples over %.1f min: RSS %.1f→%.1f MiB, slope %+.0f KiB/min; fds %d→%d, slope %+.2f/min",
		first.pid, len(xs), last.at.Sub(first.at).Minutes(), float64(first.rssKiB)/1024, float64(last.rssKiB)/1024, rs, first.fds, last.fds, fs)
}
