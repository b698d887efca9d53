package userns

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// SubIDUser is the user whose subordinate ids in /etc/subuid and
// /etc/subgid sandboxes map their ids to, when it has any.
const SubIDUser = "layerfs"

// DefaultRange is the user namespace mapping of a platform whose options
// name none: SubIDUser's first range in /etc/subuid when /etc/subgid gives
// it the same one, else Default. A sandbox maps uids and
// gids alike, so different ranges for the two are not used (and logged).
func DefaultRange(log *slog.Logger) Range {
	u, uerr := subIDRange("/etc/subuid", SubIDUser)
	g, gerr := subIDRange("/etc/subgid", SubIDUser)
	switch {
	case uerr != nil || gerr != nil:
		if !os.IsNotExist(uerr) && !os.IsNotExist(gerr) && log != nil {
			log.Warn("subordinate ids not used", "user", SubIDUser, "subuid", uerr, "subgid", gerr)
		}
	case u != g:
		if log != nil {
			log.Warn("subordinate ids not used: /etc/subuid and /etc/subgid differ", "user", SubIDUser, "subuid", u, "subgid", g)
		}
	default:
		return u
	}
	return Default
}

// subIDRange is user's first range in a subuid/subgid file ("name:first:count"
// lines); a missing entry is os.ErrNotExist.
func subIDRange(path, user string) (Range, error) {
	f, err := os.Open(path)
	if err != nil {
		return Range{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(parts) != 3 || parts[0] != user {
			continue
		}
		first, err1 := strconv.ParseUint(parts[1], 10, 32)
		count, err2 := strconv.ParseUint(parts[2], 10, 32)
		if err1 != nil || err2 != nil || first == 0 || count == 0 || first+count > 1<<32-1 {
			return Range{}, fmt.Errorf("%s: bad range %q for %s", path, sc.Text(), user)
		}
		return Range{Host: uint32(first), Size: uint32(count)}, nil
	}
	if err := sc.Err(); err != nil {
		return Range{}, fmt.Errorf("read %s: %w", path, err)
	}
	return Range{}, os.ErrNotExist
}
