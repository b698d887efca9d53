package textmerge

import (
	"bytes"
	"slices"
)

// Prefer says how Merge settles a conflict.
type Prefer int

// Ways of settling a conflict.
const (
	PreferNone   Prefer = iota // leave it, with markers
	PreferOurs                 // take ours' lines of each conflicted hunk
	PreferTheirs               // take theirs' lines of each conflicted hunk
)

// Options tune Merge. The zero value marks conflicts with "ours" and
// "theirs".
type Options struct {
	// OursLabel and TheirsLabel follow the "<<<<<<<" and ">>>>>>>" markers.
	OursLabel, TheirsLabel string
	Prefer                 Prefer
	// Diff is the line diff of each side from the base, and of a
	// conflict's two sides (zero value: Myers, as git merge-file).
	Diff Algorithm
}

// Result is a merged text.
type Result struct {
	Text []byte
	// Conflicts is the number of conflicted hunks marked in Text (0 when
	// Options.Prefer settled them).
	Conflicts int
}

// textProbe is how much of a file IsText looks at: git's rule.
const textProbe = 8000

// IsText reports whether b is text: no NUL byte in its first 8,000 bytes.
func IsText(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), textProbe)], 0) < 0
}

// Merge merges the changes ours and theirs made to base, line by line (see
// the package comment).
func Merge(base, ours, theirs []byte, opts Options) Result {
	in := interner{}
	bl, ol, tl := lines(base), lines(ours), lines(theirs)
	bi, oi, ti := in.ids(bl), in.ids(ol), in.ids(tl)
	h1, h2 := diffBy(opts.Diff, bi, oi), diffBy(opts.Diff, bi, ti)
	switch {
	case len(h1) == 0:
		return Result{Text: slices.Clone(theirs)}
	case len(h2) == 0:
		return Result{Text: slices.Clone(ours)}
	}
	m := &merger{ours: ol, theirs: tl, oi: oi, ti: ti, nbase: len(bi), alg: opts.Diff}
	m.combine(h1, h2)
	m.refine()
	m.joinClose()
	return m.output(opts)
}

// Modes of a chunk.
const (
	modeConflict = 0
	modeOurs     = 1 // a change of ours only (already in ours' text)
	modeTheirs   = 2 // a change of theirs only: replaces ours' lines
	modeSame     = 4 // a conflict whose two sides turned out equal
)

// chunk is one changed region: base lines [b, b+nb), ours' [o, o+no),
// theirs' [t, t+nt).
type chunk struct {
	mode  int
	b, nb int
	o, no int
	t, nt int
}

// merger builds the chunks of one merge. The output is ours' text with
// theirs' chunks put in and conflicts marked, so ours-only changes need
// no copying; they are chunks all the same, to find where they touch one
// of theirs.
type merger struct {
	ours, theirs [][]byte
	oi, ti       []int
	nbase        int // lines of the base
	chunks       []chunk
	alg          Algorithm
}

// add appends a chunk, joining it to the last one when they touch in
// ours' or theirs' lines; joined chunks of different modes conflict.
func (m *merger) add(c chunk) {
	if n := len(m.chunks); n > 0 {
		last := &m.chunks[n-1]
		if c.o <= last.o+last.no || c.t <= last.t+last.nt {
			if c.mode != last.mode {
				last.mode = modeConflict
			}
			last.nb = c.b + c.nb - last.b
			last.no = c.o + c.no - last.o
			last.nt = c.t + c.nt - last.t
			return
		}
	}
	m.chunks = append(m.chunks, c)
}

// combine walks the two diffs from the base in order and makes the chunks:
// a hunk that ends before the other side's next one starts is that side's
// alone; overlapping or touching hunks conflict unless they are the same
// change.
func (m *merger) combine(h1, h2 []hunk) {
	for len(h1) > 0 && len(h2) > 0 {
		x, y := h1[0], h2[0]
		switch {
		case x.A+x.NA < y.A:
			m.add(chunk{mode: modeOurs, b: x.A, nb: x.NA, o: x.B, no: x.NB, t: y.B - y.A + x.A, nt: x.NA})
			h1 = h1[1:]
			continue
		case y.A+y.NA < x.A:
			m.add(chunk{mode: modeTheirs, b: y.A, nb: y.NA, o: x.B - x.A + y.A, no: y.NA, t: y.B, nt: y.NB})
			h2 = h2[1:]
			continue
		}
		if x.A != y.A || x.NA != y.NA || x.NB != y.NB || !slices.Equal(m.oi[x.B:x.B+x.NB], m.ti[y.B:y.B+y.NB]) {
			// The conflict spans both hunks: stretch each side's range to
			// the base lines the other hunk covers.
			off := x.A - y.A
			ffo := off + x.NA - y.NA
			b, o, t := x.A, x.B, y.B
			if off > 0 {
				b, o = b-off, o-off
			} else {
				t += off
			}
			nb, no, nt := x.A+x.NA-b, x.B+x.NB-o, y.B+y.NB-t
			if ffo < 0 {
				nb, no = nb-ffo, no-ffo
			} else {
				nt += ffo
			}
			m.add(chunk{mode: modeConflict, b: b, nb: nb, o: o, no: no, t: t, nt: nt})
		}
		e1, e2 := x.A+x.NA, y.A+y.NA
		if e1 >= e2 {
			h2 = h2[1:]
		}
		if e2 >= e1 {
			h1 = h1[1:]
		}
	}
	// Past the other side's last hunk, its lines are the base's shifted by
	// what that side added or removed in all.
	for _, x := range h1 {
		m.add(chunk{mode: modeOurs, b: x.A, nb: x.NA, o: x.B, no: x.NB, t: x.A + len(m.ti) - m.nbase, nt: x.NA})
	}
	for _, y := range h2 {
		m.add(chunk{mode: modeTheirs, b: y.A, nb: y.NA, o: y.A + len(m.oi) - m.nbase, no: y.NA, t: y.B, nt: y.NB})
	}
}

// refine diffs each conflict's two sides: equal sides are no conflict, and
// otherwise each region where they differ becomes a conflict of its own,
// the lines they share between them taken as they are.
func (m *merger) refine() {
	var out []chunk
	for _, c := range m.chunks {
		if c.mode != modeConflict || c.no == 0 || c.nt == 0 {
			out = append(out, c)
			continue
		}
		hs := diffBy(m.alg, m.oi[c.o:c.o+c.no], m.ti[c.t:c.t+c.nt])
		if len(hs) == 0 {
			c.mode = modeSame
			out = append(out, c)
			continue
		}
		for _, h := range hs {
			out = append(out, chunk{mode: modeConflict, b: c.b, o: c.o + h.A, no: h.NA, t: c.t + h.B, nt: h.NB})
		}
	}
	m.chunks = out
}

// joinClose joins conflicts separated by three lines or fewer: the markers
// take no more lines that way, and read more simply.
func (m *merger) joinClose() {
	var out []chunk
	for _, c := range m.chunks {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.mode == modeConflict && c.mode == modeConflict && c.o-(last.o+last.no) <= 3 {
				last.no = c.o + c.no - last.o
				last.nt = c.t + c.nt - last.t
				continue
			}
		}
		out = append(out, c)
	}
	m.chunks = out
}

// output writes ours' lines with theirs' chunks in their place and
// conflicts marked (or settled by opts.Prefer).
func (m *merger) output(opts Options) Result {
	ol, tl := opts.OursLabel, opts.TheirsLabel
	if ol == "" {
		ol = "ours"
	}
	if tl == "" {
		tl = "theirs"
	}
	var buf bytes.Buffer
	var res Result
	i := 0 // next line of ours to copy
	copyLines := func(ls [][]byte, newline bool) {
		for _, l := range ls {
			buf.Write(l)
		}
		if newline && len(ls) > 0 && !bytes.HasSuffix(ls[len(ls)-1], []byte{'\n'}) {
			buf.WriteByte('\n')
		}
	}
	for _, c := range m.chunks {
		mode := c.mode
		if mode == modeConflict && opts.Prefer == PreferOurs {
			mode = modeOurs
		} else if mode == modeConflict && opts.Prefer == PreferTheirs {
			mode = modeTheirs
		}
		switch mode {
		case modeOurs, modeSame:
			continue // already in ours' lines
		case modeTheirs:
			copyLines(m.ours[i:c.o], false)
			copyLines(m.theirs[c.t:c.t+c.nt], false)
		case modeConflict:
			res.Conflicts++
			copyLines(m.ours[i:c.o], true)
			buf.WriteString("<<<<<<< " + ol + "\n")
			copyLines(m.ours[c.o:c.o+c.no], true)
			buf.WriteString("=======\n")
			copyLines(m.theirs[c.t:c.t+c.nt], true)
			buf.WriteString(">>>>>>> " + tl + "\n")
		}
		i = c.o + c.no
	}
	copyLines(m.ours[i:], false)
	res.Text = buf.Bytes()
	if res.Text == nil {
		res.Text = []byte{}
	}
	return res
}

// HasMarkers reports whether text still holds a line that starts a
// conflict ("<<<<<<< "), separates its sides ("=======") or ends it
// (">>>>>>> "): what Merge leaves in a conflicted text.
func HasMarkers(text []byte) bool {
	for _, l := range lines(text) {
		l = bytes.TrimRight(l, "\r\n")
		if bytes.HasPrefix(l, []byte("<<<<<<< ")) || bytes.HasPrefix(l, []byte(">>>>>>> ")) || bytes.Equal(l, []byte("=======")) {
			return true
		}
	}
	return false
}
