package bench

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// DescribeFS names the file system dir is on, as "ext4 (journal) on
// /dev/vda": what a reader needs to compare figures, since create/delete
// churn on ext4 without a journal is several times slower natively.
func DescribeFS(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "unknown"
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, fstype, source := "", "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		mp := unescapeMount(fields[4])
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, fstype, source = mp, fields[sep+1], fields[sep+2]
		}
	}
	if fstype == "" {
		return "unknown"
	}
	desc := fstype
	if fstype == "ext4" || fstype == "ext3" {
		// jbd2 lists a journaled file system's device.
		if m, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(source) + "-*"); len(m) > 0 {
			desc += " (journal)"
		} else {
			desc += " (no journal)"
		}
	}
	return desc + " on " + source + " at " + best
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
