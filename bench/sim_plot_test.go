package bench

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"
)

// limitPlot draws TestSimAdaptive's limits over time as a hand-written SVG:
// the two adaptive limiters' limits (sampled every 100 ms), the best and
// the mistuned static limits as flat lines, the capacity C as a step line,
// and the phase boundaries.
func limitPlot(ours, fs, best, mistuned *simArm) []byte {
	const (
		w, h                     = 990, 440
		left, right, top, bottom = 60, 230, 60, 50
		pw, ph                   = w - left - right, h - top - bottom
	)
	end := simEnd.Seconds()
	top1 := float64(max(best.static, mistuned.static))
	for _, a := range []*simArm{ours, fs} {
		for _, v := range a.limits {
			top1 = max(top1, float64(v))
		}
	}
	for _, p := range simPhases {
		top1 = max(top1, float64(p.c))
	}
	step := niceStep(top1 / 6)
	yMax := math.Ceil(top1*1.05/step) * step
	x := func(s float64) float64 { return left + s/end*pw }
	y := func(v float64) float64 { return top + ph - v/yMax*ph }

	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	p(`<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	p(`<text x="%d" y="16" font-size="14" font-weight="bold">Concurrency limit over time (sampled every 100 ms): simulated dependency, offered 2x its capacity, no queue</text>`+"\n", left)

	// Grid and axes.
	for v := 0.0; v <= yMax+step/2; v += step {
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, y(v), left+pw, y(v))
		p(`<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left-6, y(v)+4, v)
	}
	for s := 0.0; s <= end+1; s += 60 {
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e4e4"/>`+"\n", x(s), top, x(s), top+ph)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%g</text>`+"\n", x(s), top+ph+16, s)
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top+ph, left+pw, top+ph)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, top+ph)
	p(`<text x="%d" y="%d" text-anchor="middle">time (s)</text>`+"\n", left+pw/2, h-12)
	p(`<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">limit (calls in flight)</text>`+"\n", top+ph/2, top+ph/2)

	// Phase boundaries and names.
	for i, phase := range simPhases {
		s0, s1 := phase.start.Seconds(), (phase.start + phase.dur).Seconds()
		if i > 0 {
			p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#888" stroke-dasharray="4 3"/>`+"\n", x(s0), top, x(s0), top+ph)
		}
		name := ""
		if i == len(simPhases)-1 {
			name = "incident: "
		}
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555" font-size="11">%sC = %d<tspan x="%.1f" dy="13">B = %v</tspan></text>`+"\n",
			(x(s0)+x(s1))/2, top-20, name, phase.c, (x(s0)+x(s1))/2, phase.b)
	}

	// Series: capacity, statics, adaptive limits.
	var capacity []float64
	for i := 0; time.Duration(i)*simSampleEvery <= simEnd; i++ {
		capacity = append(capacity, float64(simPhases[simPhaseAt(time.Duration(i)*simSampleEvery)].c))
	}
	flat := func(v float64) []float64 { return []float64{v, v} }
	type series struct {
		name, color, dash string
		width             float64
		v                 []float64
	}
	all := []series{
		{"capacity C", "#999", "", 5, capacity},
		{fmt.Sprintf("static %d (best)", best.static), "#2a9d3a", "8 4", 1.5, flat(float64(best.static))},
		{fmt.Sprintf("static %d (mistuned)", mistuned.static), "#d62728", "8 4", 1.5, flat(float64(mistuned.static))},
		{"failsafe-go adaptivelimiter", "#ff7f0e", "", 1.5, ints(fs.limits)},
		{"watertight adaptive", "#1f5fbf", "", 1.5, ints(ours.limits)},
	}
	for i, s := range all {
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		p(`<polyline fill="none" stroke="%s" stroke-width="%g"%s stroke-linejoin="round" points="%s"/>`+"\n",
			s.color, s.width, dash, stepPoints(s.v, end, x, y))
		ly := top + 10 + i*20
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%g"%s/>`+"\n", left+pw+12, ly, left+pw+36, ly, s.color, min(s.width, 4), dash)
		p(`<text x="%d" y="%d">%s</text>`+"\n", left+pw+42, ly+4, s.name)
	}
	p("</svg>\n")
	return b.Bytes()
}

func ints(v []int) []float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(x)
	}
	return f
}

// stepPoints draws v, evenly spread over [0, end] seconds, as steps: a
// point only where the value changes.
func stepPoints(v []float64, end float64, x, y func(float64) float64) string {
	if len(v) == 0 {
		return ""
	}
	dt := end / float64(max(len(v)-1, 1))
	var b strings.Builder
	pt := func(s, val float64) { fmt.Fprintf(&b, "%.1f,%.1f ", x(s), y(val)) }
	pt(0, v[0])
	for i := 1; i < len(v); i++ {
		if v[i] != v[i-1] {
			pt(float64(i)*dt, v[i-1])
			pt(float64(i)*dt, v[i])
		}
	}
	pt(end, v[len(v)-1])
	return strings.TrimSpace(b.String())
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return max(m*p, 1)
		}
	}
	return 10 * p
}
