package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressBar draws progress on stderr: a bar redrawn in place on a
// terminal, a line every few seconds otherwise (logs, CI).
type progressBar struct {
	mu    sync.Mutex
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

func newProgressBar(w io.Writer, label, unit string, total int64) *progressBar {
	now := time.Now()
	p := &progressBar{w: w, label: label, unit: unit, total: total, start: now, last: now, every: 2 * time.Second}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.every = true, 100*time.Millisecond
		}
	}
	return p
}

// newPositionBar returns a bar whose completion is fraction() (by position
// in a log, say) while it counts units.
func newPositionBar(w io.Writer, label string, fraction func() float64) *progressBar {
	p := newProgressBar(w, label, "events", 0)
	p.fraction = fraction
	return p
}

// update redraws the bar for done units if it is time to.
func (p *progressBar) update(done int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || time.Since(p.last) < p.every {
		return
	}
	p.draw(done)
}

// finish draws the final state and ends the line.
func (p *progressBar) finish(done int64) {
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

func (p *progressBar) draw(done int64) {
	p.last = time.Now()
	elapsed := time.Since(p.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	var b strings.Builder
	b.WriteString(p.label)
	frac, known := 0.0, false
	switch {
	case p.total > 0:
		frac, known = min(float64(done)/float64(p.total), 1), true
	case p.fraction != nil:
		frac, known = p.fraction(), true
	}
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
	fmt.Fprintf(&b, "  %.0f %s/s  %s", rate, p.unit, age(elapsed))
	if known && frac > 0 && frac < 1 {
		fmt.Fprintf(&b, "  ETA %s", age(time.Duration(float64(elapsed)*(1-frac)/frac)))
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\x1b[K", b.String())
	} else {
		fmt.Fprintln(p.w, b.String())
	}
	p.drawn = true
}

// note prints a line of its own, above the bar.
func (p *progressBar) note(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.last = time.Time{} // redraw on the next update
	}
	fmt.Fprintln(p.w, msg)
}
