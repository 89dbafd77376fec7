package clikit

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ProgressBar draws progress on a console: a bar redrawn in place on a
// terminal, a line every few seconds otherwise (logs, CI), a JSON object
// every few seconds when the console is JSON.
type ProgressBar struct {
	mu    sync.Mutex
	con   *Console
	w     io.Writer
	tty   bool
	label string
	unit  string
	total int64 // 0 when unknown
	// fraction, if set, tells how far the work is (0 to 1) when total
	// is unknown.
	fraction func() float64
	start    time.Time
	last     time.Time
	every    time.Duration
	drawn    bool
	closed   bool
}

// NewProgressBar returns a bar counting unit towards total (0: unknown).
func NewProgressBar(con *Console, label, unit string, total int64) *ProgressBar {
	now := time.Now()
	w := con.Writer()
	// The first Update draws at once: a phase's bar comes before its notes.
	p := &ProgressBar{con: con, w: w, label: label, unit: unit, total: total, start: now, every: 2 * time.Second}
	if !con.JSON() && IsTerminal(w) {
		p.tty, p.every = true, 100*time.Millisecond
	}
	return p
}

// NewPositionBar returns a bar whose completion is fraction() (by position
// in a log, say) while it counts units.
func NewPositionBar(con *Console, label string, fraction func() float64) *ProgressBar {
	p := NewProgressBar(con, label, "events", 0)
	p.fraction = fraction
	return p
}

// Update redraws the bar for done units if it is time to.
func (p *ProgressBar) Update(done int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || time.Since(p.last) < p.every {
		return
	}
	p.draw(done)
}

// Finish draws the final state and ends the line.
func (p *ProgressBar) Finish(done int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.draw(done)
	if p.tty {
		fmt.Fprintln(p.w)
	}
	p.closed = true
}

func (p *ProgressBar) draw(done int64) {
	p.last = time.Now()
	elapsed := time.Since(p.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	frac, known := 0.0, false
	switch {
	case p.total > 0:
		frac, known = min(float64(done)/float64(p.total), 1), true
	case p.fraction != nil:
		frac, known = p.fraction(), true
	}
	if p.con.JSON() {
		attrs := []any{"label", p.label, "done", done, "unit", p.unit, "rate_per_second", rate, "elapsed", elapsed}
		if p.total > 0 {
			attrs = append(attrs, "total", p.total)
		}
		if known {
			attrs = append(attrs, "fraction", frac)
			if frac > 0 && frac < 1 {
				attrs = append(attrs, "eta", time.Duration(float64(elapsed)*(1-frac)/frac))
			}
		}
		p.con.Printf(attrs, "progress")
		return
	}
	var b strings.Builder
	b.WriteString(p.label)
	if known {
		const width = 30
		n := int(frac * width)
		b.WriteString(" [" + strings.Repeat("=", n))
		if n < width {
			b.WriteString(">" + strings.Repeat(" ", width-n-1))
		}
		fmt.Fprintf(&b, "] %3.0f%% ", frac*100)
	}
	if p.total > 0 {
		fmt.Fprintf(&b, " %d/%d %s", done, p.total, p.unit)
	} else {
		fmt.Fprintf(&b, " %d %s", done, p.unit)
	}
	fmt.Fprintf(&b, "  %.0f %s/s  %s", rate, p.unit, Age(elapsed))
	if known && frac > 0 && frac < 1 {
		fmt.Fprintf(&b, "  ETA %s", Age(time.Duration(float64(elapsed)*(1-frac)/frac)))
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", b.String())
	} else {
		fmt.Fprintln(p.w, b.String())
	}
	p.drawn = true
}

// Note prints a line of its own, above the bar.
func (p *ProgressBar) Note(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.last = time.Time{} // redraw on the next update
	}
	p.con.Printf(nil, "%s", msg)
}
