package image

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// User is a config's User resolved in an image's tree: the ids its
// commands run as and the home directory its passwd entry names.
type User struct {
	UID, GID int
	Home     string // "" when the passwd file names none
}

// ResolveUser resolves spec ("", "uid", "uid:gid", "name", "name:group")
// against the /etc/passwd and /etc/group of the tree root, as container
// engines do: a name must be listed; a numeric uid need not be, and then
// has gid 0 unless spec names one.
func ResolveUser(ctx context.Context, r commit.Reader, root store.ID, spec string) (User, error) {
	u := User{Home: "/root"}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	passwd, err := readFile(ctx, r, root, "etc/passwd")
	if err != nil {
		return u, err
	}
	found := false
	if userPart == "" {
		userPart = "0"
	}
	for _, f := range colonFields(passwd, 7) {
		if f[0] == userPart || f[2] == userPart {
			uid, err1 := strconv.Atoi(f[2])
			gid, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil {
				continue
			}
			u.UID, u.GID, u.Home, found = uid, gid, f[5], true
			break
		}
	}
	if !found {
		uid, err := strconv.Atoi(userPart)
		if err != nil || uid < 0 {
			return u, fmt.Errorf("%w: image user %q: no such user in the image's /etc/passwd", errclass.Invalid, spec)
		}
		u.UID, u.GID, u.Home = uid, 0, ""
		if uid == 0 {
			u.Home = "/root"
		}
	}
	if !hasGroup {
		return u, nil
	}
	if gid, err := strconv.Atoi(groupPart); err == nil && gid >= 0 {
		u.GID = gid
		return u, nil
	}
	group, err := readFile(ctx, r, root, "etc/group")
	if err != nil {
		return u, err
	}
	for _, f := range colonFields(group, 3) {
		if f[0] == groupPart {
			if gid, err := strconv.Atoi(f[2]); err == nil {
				u.GID = gid
				return u, nil
			}
		}
	}
	return u, fmt.Errorf("%w: image user %q: no such group in the image's /etc/group", errclass.Invalid, spec)
}

// colonFields splits the lines of a passwd-style file into at least n
// fields each, skipping lines with fewer.
func colonFields(b []byte, n int) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) >= n {
			out = append(out, f)
		}
	}
	return out
}

// readFile reads the regular file at rel in the tree root; a missing
// file reads as empty.
func readFile(ctx context.Context, r commit.Reader, root store.ID, rel string) ([]byte, error) {
	id := root
	var e *store.Entry
	for name := range strings.SplitSeq(rel, "/") {
		if id.IsZero() {
			return nil, nil
		}
		t, err := r.Tree(ctx, id)
		if err != nil {
			return nil, err
		}
		var ok bool
		if e, ok = t.Find(name); !ok {
			return nil, nil
		}
		id = store.ZeroID
		if e.Type == store.TypeDir {
			id = e.Object
		}
	}
	if e == nil || e.Type != store.TypeFile || e.Size > 16<<20 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := writeContent(ctx, r, e, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// MissingDirs lists the changes that make the directory rel (and its
// missing parents) in the tree root, each new one 0755 and owned by
// uid:gid; none when it is there. A file or a symlink on the way fails.
func MissingDirs(ctx context.Context, r commit.Reader, root store.ID, rel string, uid, gid uint32) ([]commit.Change, error) {
	var out []commit.Change
	id, missing, p := root, false, ""
	for name := range strings.SplitSeq(rel, "/") {
		if name == "" {
			continue
		}
		p = strings.TrimPrefix(p+"/"+name, "/")
		if !missing {
			var e *store.Entry
			if !id.IsZero() {
				t, err := r.Tree(ctx, id)
				if err != nil {
					return nil, err
				}
				e, _ = t.Find(name)
			}
			switch {
			case e == nil:
				missing = true
			case e.Type != store.TypeDir:
				return nil, fmt.Errorf("%w: /%s is a %s, not a directory", errclass.Invalid, p, e.Type)
			default:
				id = e.Object
				continue
			}
		}
		out = append(out, commit.Change{Path: p, Entry: &store.Entry{Name: name, Type: store.TypeDir, Mode: 0o755,
			UID: uid, GID: gid, ObjectKind: store.KindTree}})
	}
	return out, nil
}
