package textmerge

import "bytes"

// hunk is one change of a diff from a to b: a's lines [A, A+NA) become
// b's lines [B, B+NB). Hunks are in order and separated by lines the two
// share.
type hunk struct {
	A, NA, B, NB int
}

// lines splits text into lines, each with its '\n' (the last may have none).
func lines(text []byte) [][]byte {
	if len(text) == 0 {
		return nil
	}
	out := make([][]byte, 0, bytes.Count(text, []byte{'\n'})+1)
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			out = append(out, text)
			break
		}
		out = append(out, text[:i+1])
		text = text[i+1:]
	}
	return out
}

// interner gives equal lines equal numbers, so the diff compares ints.
type interner map[string]int

func (in interner) ids(ls [][]byte) []int {
	out := make([]int, len(ls))
	for i, l := range ls {
		id, ok := in[string(l)]
		if !ok {
			id = len(in)
			in[string(l)] = id
		}
		out[i] = id
	}
	return out
}

// Algorithm is the line diff a merge compares each side with the base by.
type Algorithm int

// The diffs.
const (
	// Myers: a shortest edit script (Myers' O(ND) algorithm), as git
	// merge-file's default.
	Myers Algorithm = iota
	// Histogram: git's histogram diff, the one git merge (merge-ort) and
	// git merge-tree use.
	Histogram
)

// diffBy returns the hunks that turn a into b, along a longest common
// subsequence (Myers) or the histogram diff's common runs.
func diffBy(alg Algorithm, a, b []int) []hunk {
	d := &differ{a: a, b: b, ca: make([]bool, len(a)), cb: make([]bool, len(b))}
	n := len(a) + len(b) + 5
	d.vf, d.vb = make([]int, n), make([]int, n)
	if alg == Histogram {
		d.histogram(0, len(a), 0, len(b))
	} else {
		d.compare(0, len(a), 0, len(b))
	}
	compact(a, d.ca, d.cb)
	compact(b, d.cb, d.ca)
	var out []hunk
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if i < len(a) && j < len(b) && !d.ca[i] && !d.cb[j] {
			i, j = i+1, j+1
			continue
		}
		h := hunk{A: i, B: j}
		for i < len(a) && d.ca[i] {
			i++
		}
		for j < len(b) && d.cb[j] {
			j++
		}
		h.NA, h.NB = i-h.A, j-h.B
		out = append(out, h)
	}
	return out
}

// differ marks the lines of a and b that are not on the common
// subsequence (ca, cb); vf and vb are the forward and backward frontiers
// of the middle-snake search, reused across the recursion.
type differ struct {
	a, b   []int
	ca, cb []bool
	vf, vb []int
}

// compare diffs a[alo:ahi] against b[blo:bhi]: it sets aside their common
// head and tail, splits the rest at a middle snake and recurses on both
// halves.
func (d *differ) compare(alo, ahi, blo, bhi int) {
	for alo < ahi && blo < bhi && d.a[alo] == d.b[blo] {
		alo, blo = alo+1, blo+1
	}
	for alo < ahi && blo < bhi && d.a[ahi-1] == d.b[bhi-1] {
		ahi, bhi = ahi-1, bhi-1
	}
	switch {
	case alo == ahi:
		for j := blo; j < bhi; j++ {
			d.cb[j] = true
		}
		return
	case blo == bhi:
		for i := alo; i < ahi; i++ {
			d.ca[i] = true
		}
		return
	}
	x, y, u, v := d.middleSnake(alo, ahi, blo, bhi)
	if x == alo && y == blo && u == ahi && v == bhi {
		// Cannot happen with both ranges trimmed and not empty; marking
		// both changed keeps the result a valid (if longer) diff.
		for i := alo; i < ahi; i++ {
			d.ca[i] = true
		}
		for j := blo; j < bhi; j++ {
			d.cb[j] = true
		}
		return
	}
	d.compare(alo, x, blo, y)
	d.compare(u, ahi, v, bhi)
}

// middleSnake finds the snake in the middle of a shortest edit path from
// (alo, blo) to (ahi, bhi) by searching from both ends at once (Myers
// 1986, section 4b): it returns the snake's start (x, y) and end (u, v).
// Backward positions count from the ends of the ranges.
func (d *differ) middleSnake(alo, ahi, blo, bhi int) (x, y, u, v int) {
	a, b := d.a[alo:ahi], d.b[blo:bhi]
	n, m := len(a), len(b)
	delta := n - m
	odd := delta&1 != 0
	limit := (n + m + 1) / 2
	off := limit + 1
	vf, vb := d.vf[:2*limit+3], d.vb[:2*limit+3]
	vf[off+1], vb[off+1] = 0, 0
	for D := 0; D <= limit; D++ {
		for k := -D; k <= D; k += 2 {
			var px int
			if k == -D || (k != D && vf[off+k-1] < vf[off+k+1]) {
				px = vf[off+k+1]
			} else {
				px = vf[off+k-1] + 1
			}
			py := px - k
			sx, sy := px, py
			for px < n && py < m && a[px] == b[py] {
				px, py = px+1, py+1
			}
			vf[off+k] = px
			if kb := delta - k; odd && kb >= -(D-1) && kb <= D-1 && px+vb[off+kb] >= n {
				return alo + sx, blo + sy, alo + px, blo + py
			}
		}
		for kb := -D; kb <= D; kb += 2 {
			var px int
			if kb == -D || (kb != D && vb[off+kb-1] < vb[off+kb+1]) {
				px = vb[off+kb+1]
			} else {
				px = vb[off+kb-1] + 1
			}
			py := px - kb
			sx, sy := px, py
			for px < n && py < m && a[n-1-px] == b[m-1-py] {
				px, py = px+1, py+1
			}
			vb[off+kb] = px
			if k := delta - kb; !odd && k >= -D && k <= D && vf[off+k]+px >= n {
				return alo + n - px, blo + m - py, alo + n - sx, blo + m - sy
			}
		}
	}
	// Unreachable: a path of at most n+m edits always exists.
	return alo, blo, ahi, bhi
}

// compact slides each run of changed lines of x (changed, over the lines
// x) as far down as equal lines allow, then back up to end where a change
// of the other file (other) ends, if one was met on the way: the place
// git's diff (xdiff's change compaction) gives a change that could be in
// several. Both sides' diffs of a merge then put an identical change at
// the same place, whatever lines surround it. Runs that meet while
// sliding become one.
func compact(x []int, changed, other []bool) {
	g := newGroup(changed)
	o := newGroup(other)
	for {
		if g.end > g.start {
			var size, earliestEnd int
			endMatching := -1
			for {
				size = g.end - g.start
				endMatching = -1
				for g.slideUp(x) {
					o.previous()
				}
				earliestEnd = g.end
				if o.end > o.start {
					endMatching = g.end
				}
				for g.slideDown(x) {
					o.next()
					if o.end > o.start {
						endMatching = g.end
					}
				}
				if size == g.end-g.start {
					break
				}
			}
			if g.end != earliestEnd && endMatching >= 0 {
				for o.end == o.start {
					g.slideUp(x)
					o.previous()
				}
			}
		}
		if !g.next() {
			return
		}
		o.next()
	}
}

// group is a run of changed lines [start, end) of a file, empty between
// two unchanged lines; the groups of the two files of a diff pair up in
// order.
type group struct {
	changed    []bool
	start, end int
}

func newGroup(changed []bool) *group {
	g := &group{changed: changed}
	for g.end < len(changed) && changed[g.end] {
		g.end++
	}
	return g
}

func (g *group) at(i int) bool { return i >= 0 && i < len(g.changed) && g.changed[i] }

func (g *group) next() bool {
	if g.end == len(g.changed) {
		return false
	}
	g.start = g.end + 1
	g.end = g.start
	for g.at(g.end) {
		g.end++
	}
	return true
}

func (g *group) previous() bool {
	if g.start == 0 {
		return false
	}
	g.end = g.start - 1
	g.start = g.end
	for g.at(g.start - 1) {
		g.start--
	}
	return true
}

// slideDown moves the group one line down when the line after it equals
// its first, joining a group it then meets.
func (g *group) slideDown(x []int) bool {
	if g.end >= len(x) || x[g.start] != x[g.end] {
		return false
	}
	g.changed[g.start], g.changed[g.end] = false, true
	g.start, g.end = g.start+1, g.end+1
	for g.at(g.end) {
		g.end++
	}
	return true
}

// slideUp moves the group one line up when the line before it equals its
// last, joining a group it then meets.
func (g *group) slideUp(x []int) bool {
	if g.start == 0 || x[g.start-1] != x[g.end-1] {
		return false
	}
	g.start, g.end = g.start-1, g.end-1
	g.changed[g.start], g.changed[g.end] = true, false
	for g.at(g.start - 1) {
		g.start--
	}
	return true
}
