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

// diff returns the hunks that turn a into b, along a longest common
// subsequence.
func diff(a, b []int) []hunk {
	d := &differ{a: a, b: b, ca: make([]bool, len(a)), cb: make([]bool, len(b))}
	n := len(a) + len(b) + 5
	d.vf, d.vb = make([]int, n), make([]int, n)
	d.compare(0, len(a), 0, len(b))
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
