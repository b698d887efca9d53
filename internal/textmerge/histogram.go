package textmerge

// The histogram diff (git's --histogram, the diff git's merge uses): it
// splits the files at the longest run of lines the two share that holds
// the rarest line of the region (the fewest occurrences in a's part), then
// diffs the parts before and after the same way. A region whose common
// lines are all frequent (more than maxChain occurrences) falls back to
// Myers' diff.

// maxChain is the most occurrences a line may have in a region for the
// histogram diff to split at it.
const maxChain = 64

// histogram marks d's changed lines of a[lo1:hi1] against b[lo2:hi2].
func (d *differ) histogram(lo1, hi1, lo2, hi2 int) {
	for {
		switch {
		case lo1 >= hi1 && lo2 >= hi2:
			return
		case lo1 >= hi1:
			for j := lo2; j < hi2; j++ {
				d.cb[j] = true
			}
			return
		case lo2 >= hi2:
			for i := lo1; i < hi1; i++ {
				d.ca[i] = true
			}
			return
		}
		h := newHistIndex(d.a, lo1, hi1)
		for bp := lo2; bp < hi2; {
			bp = h.try(d.a, d.b, bp, lo1, hi1, lo2, hi2)
		}
		switch {
		case h.common && h.cnt > maxChain:
			d.compare(lo1, hi1, lo2, hi2)
			return
		case !h.found:
			for i := lo1; i < hi1; i++ {
				d.ca[i] = true
			}
			for j := lo2; j < hi2; j++ {
				d.cb[j] = true
			}
			return
		}
		d.histogram(lo1, h.b1, lo2, h.b2)
		lo1, lo2 = h.e1+1, h.e2+1
	}
}

// histIndex is one region's histogram of a's lines: for each distinct
// line its first occurrence and count, each occurrence's next; and the
// best common run found so far, [b1, e1] in a and [b2, e2] in b.
type histIndex struct {
	first, count map[int]int // line -> first occurrence, occurrences
	next         []int       // occurrence - lo -> the next one, or -1
	lo           int
	cnt          int // the lowest count of the best run
	common       bool
	found        bool
	b1, e1       int
	b2, e2       int
}

func newHistIndex(a []int, lo, hi int) *histIndex {
	h := &histIndex{first: map[int]int{}, count: map[int]int{}, next: make([]int, hi-lo), lo: lo, cnt: maxChain + 1}
	for i := hi - 1; i >= lo; i-- {
		if f, ok := h.first[a[i]]; ok {
			h.next[i-lo] = f
		} else {
			h.next[i-lo] = -1
		}
		h.first[a[i]] = i
		h.count[a[i]]++
	}
	return h
}

// try extends each occurrence in a of b's line bp into the longest run
// the two share around it, keeps the best run (longer, or with rarer
// lines) and returns the next line of b to try.
func (h *histIndex) try(a, b []int, bp, lo1, hi1, lo2, hi2 int) int {
	bnext := bp + 1
	first, ok := h.first[b[bp]]
	if !ok {
		return bnext
	}
	h.common = true
	cnt := h.count[b[bp]]
	if cnt > h.cnt {
		return bnext
	}
	as := first
	for {
		np := h.next[as-h.lo]
		bs, ae, be, rc := bp, as, bp, cnt
		for as > lo1 && bs > lo2 && a[as-1] == b[bs-1] {
			as, bs = as-1, bs-1
			if rc > 1 {
				rc = min(rc, h.count[a[as]])
			}
		}
		for ae < hi1-1 && be < hi2-1 && a[ae+1] == b[be+1] {
			ae, be = ae+1, be+1
			if rc > 1 {
				rc = min(rc, h.count[a[ae]])
			}
		}
		if bnext <= be {
			bnext = be + 1
		}
		if h.e1-h.b1 < ae-as || rc < h.cnt {
			h.b1, h.e1, h.b2, h.e2, h.cnt, h.found = as, ae, bs, be, rc, true
		}
		for np >= 0 && np <= ae {
			np = h.next[np-h.lo]
		}
		if np < 0 {
			return bnext
		}
		as = np
	}
}
