package commit

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"path"
	"slices"

	"layerfs.dev/layerfs/internal/store"
)

// DefaultRenameThreshold is the similarity, in percent, from which a file
// one side removed and one it added are a rename: git's default (-M50%).
const DefaultRenameThreshold = 50

// renamePairLimit bounds the pairs of removed and added files whose
// similarity a merge scores (git's merge.renameLimit is 7,000 files a
// side); past it only exact renames are found.
const renamePairLimit = 1_000_000

// findRenames pairs the regular files one side removed with those it
// added: exact renames first (exactRenames), then, unless the threshold
// is 100, by similarity as git scores it (similarity). Each removed and
// each added file is in one pair at most; the best scores pair first, a
// pair with the same base name before another of the same score.
func (m *merger) findRenames(ctx context.Context, ds []Difference) (map[string]string, error) {
	if m.opts.NoRenames {
		return map[string]string{}, nil
	}
	out := exactRenames(ds)
	threshold := m.opts.RenameThreshold
	if threshold <= 0 {
		threshold = DefaultRenameThreshold
	}
	if threshold >= 100 {
		return out, nil
	}
	taken := map[string]bool{}
	for _, dst := range out {
		taken[dst] = true
	}
	type file struct {
		path string
		e    *store.Entry
	}
	var removed, added []file
	for i := range ds {
		d := &ds[i]
		switch {
		case isRenameFile(d.Old) && (d.New == nil || d.New.Type == store.TypeDir) && out[d.Path] == "":
			removed = append(removed, file{d.Path, d.Old})
		case isRenameFile(d.New) && (d.Old == nil || d.Old.Type == store.TypeDir) && !taken[d.Path]:
			added = append(added, file{d.Path, d.New})
		}
	}
	if len(removed) == 0 || len(added) == 0 || len(removed)*len(added) > renamePairLimit {
		return out, nil
	}
	sigs := map[store.ID]signature{}
	sig := func(e *store.Entry) (signature, error) {
		if s, ok := sigs[e.Object]; ok {
			return s, nil
		}
		data, err := readContent(ctx, m.r, e)
		if err != nil {
			return nil, err
		}
		s := newSignature(data)
		sigs[e.Object] = s
		return s, nil
	}
	type pair struct {
		src, dst   int
		score      int
		sameBase   bool
		srcP, dstP string
	}
	var pairs []pair
	for j, a := range added {
		for i, r := range removed {
			small, large := min(r.e.Size, a.e.Size), max(r.e.Size, a.e.Size)
			if large > m.limit || small*100 < int64(threshold)*large {
				continue // too large to read, or too unlike in size to reach the threshold
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			rs, err := sig(r.e)
			if err != nil {
				return nil, fmt.Errorf("rename source %s: %w", r.path, err)
			}
			as, err := sig(a.e)
			if err != nil {
				return nil, fmt.Errorf("rename target %s: %w", a.path, err)
			}
			if score := int(rs.common(as) * 100 / large); score >= threshold {
				pairs = append(pairs, pair{i, j, score, path.Base(r.path) == path.Base(a.path), r.path, a.path})
			}
		}
	}
	slices.SortFunc(pairs, func(x, y pair) int {
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		if x.sameBase != y.sameBase {
			if x.sameBase {
				return -1
			}
			return 1
		}
		return cmp.Or(ComparePaths(x.dstP, y.dstP), ComparePaths(x.srcP, y.srcP))
	})
	usedSrc, usedDst := make([]bool, len(removed)), make([]bool, len(added))
	for _, p := range pairs {
		if usedSrc[p.src] || usedDst[p.dst] {
			continue
		}
		usedSrc[p.src], usedDst[p.dst] = true, true
		out[p.srcP] = p.dstP
	}
	return out, nil
}

// isRenameFile reports whether e can be a rename's source or target: a
// regular file with content.
func isRenameFile(e *store.Entry) bool { return e != nil && e.Type == store.TypeFile && e.Size > 0 }

// signature is how many bytes of a content each hash of its pieces
// covers: its lines, a line longer than 64 bytes cut into pieces of 64
// (git's diffcore-delta, which scores binary content the same way).
type signature map[uint64]int64

func newSignature(data []byte) signature {
	s := signature{}
	for len(data) > 0 {
		n := bytes.IndexByte(data, '\n') + 1
		if n == 0 || n > 64 {
			n = min(64, len(data))
		}
		h := fnv.New64a()
		h.Write(data[:n])
		s[h.Sum64()] += int64(n)
		data = data[n:]
	}
	return s
}

// common is the number of bytes the two contents share, piece by piece.
func (s signature) common(o signature) int64 {
	var n int64
	for h, c := range s {
		n += min(c, o[h])
	}
	return n
}
