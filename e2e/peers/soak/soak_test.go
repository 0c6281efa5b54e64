//go:build linux

package main

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		name      string
		runErr    error
		isError   bool
		text, err string
		want      string
	}{
		{name: "success carries the nonce", text: "go-1", want: ""},
		{name: "result without the nonce is fabricated", text: "go-2", want: "fabricated"},
		{name: "empty result is fabricated", text: "", want: "fabricated"},
		{name: "JSON-RPC error", err: `{"code":-31004}`, want: "error"},
		{name: "tool error result", isError: true, text: "go-1", want: "error"},
		{name: "client failed after a good result", runErr: errors.New("exit status 1"), text: "go-1", want: "error"},
		{name: "client failed with a foreign result", runErr: errors.New("exit status 1"), text: "other", want: "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.runErr, c.isError, c.text, "go-1", c.err); got.kind != c.want {
				t.Errorf("judge = %q (%s), want %q", got.kind, got.err, c.want)
			}
		})
	}
}

func TestAttribute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	windows := []window{{name: "reset", start: at(10), end: at(12)}, {name: "hang", start: at(20), end: at(22)}}
	events := []event{
		{client: "loadgen", start: at(9), end: at(10.5)},  // started before, ended inside
		{client: "loadgen", start: at(14.9), end: at(15)}, // inside the grace (3 s)
		{client: "go", start: at(15.1), end: at(16)},      // after the grace: outside
		{client: "node", start: at(19), end: at(26)},      // spans the hang window
		{client: "loadgen", start: at(30), end: at(30)},   // after everything
		{client: "go", start: at(1), end: at(9.9)},        // before everything
	}
	per, outside, evs := attribute(events, windows, 3*time.Second)
	if per[0]["loadgen"] != 2 || per[1]["node"] != 1 || len(per[0])+len(per[1]) != 2 {
		t.Errorf("per window %v", per)
	}
	if outside["go"] != 2 || outside["loadgen"] != 1 || len(evs) != 3 {
		t.Errorf("outside %v (%d events)", outside, len(evs))
	}
}

func TestSlope(t *testing.T) {
	if _, ok := slope([]float64{1, 2}, []float64{1, 2}); ok {
		t.Error("two points gave a slope")
	}
	if _, ok := slope([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("no spread in x gave a slope")
	}
	got, ok := slope([]float64{0, 1, 2, 3}, []float64{5, 7, 9, 11})
	if !ok || math.Abs(got-2) > 1e-9 {
		t.Errorf("slope = %v, %v; want 2", got, ok)
	}
}
