package fsbench

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// verify checks a cell's end state (CELLS.md, "What the verifier checks");
// C12's repository is checked with git itself.
func verify(c Cell, dir, base string) error {
	zero := func(name string) error {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		var n int64
		for {
			k, err := f.Read(buf)
			if k > 0 && !bytes.Equal(buf[:k], make([]byte, k)) {
				return fmt.Errorf("%s: not all zeros", name)
			}
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		if n != 64<<20 {
			return fmt.Errorf("%s: %d bytes, want 64 MiB", name, n)
		}
		return nil
	}
	same := func(a, b string) error {
		ha, err := hashFile(a)
		if err != nil {
			return err
		}
		hb, err := hashFile(b)
		if err != nil {
			return err
		}
		if ha != hb {
			return fmt.Errorf("%s differs from the base", a)
		}
		return nil
	}
	switch c.Name {
	case "C01", "C02":
		for i := 1; i <= 1000; i++ {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint("f", i)))
			if err != nil || string(b) != fmt.Sprintf("%d\n", i) {
				return fmt.Errorf("f%d wrong: %q %v", i, b, err)
			}
		}
	case "C03":
		if _, err := os.Stat(filepath.Join(dir, "f1")); err == nil {
			return fmt.Errorf("f1 still there")
		}
	case "C04", "C05":
		n := 0
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				n++
			}
			return nil
		})
		if n != 1000 {
			return fmt.Errorf("%d files, want 1000", n)
		}
	case "C06", "C08":
		return zero("big")
	case "C07":
		if err := zero("big"); err != nil {
			return err
		}
		return zero("big2")
	case "C09":
		return same(filepath.Join(dir, "big"), base)
	case "C10":
		return same(filepath.Join(dir, "big2"), base)
	case "C11":
		return zero("big")
	case "C12":
		if _, err := os.Stat(filepath.Join(dir, ".git", "HEAD")); err != nil {
			return err
		}
	}
	return nil
}

func hashFile(p string) ([32]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, err
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s, nil
}
