package schema

import (
	"strconv"
	"strings"
	"sync"
)

// Dialect holds what differs between the two SQL engines behind a Store:
// SQLite (the embedded Store, the zero Dialect) and PostgreSQL (a shared
// Store). Statements are written once, in SQLite's spelling; on PostgreSQL
// each is rewritten once (and cached): ? placeholders become $n and INSERT
// OR IGNORE becomes INSERT ... ON CONFLICT DO NOTHING. On SQLite the text
// is used as it is, at no cost. A Dialect must not be copied after first
// use.
type Dialect struct {
	Postgres  bool
	rewritten sync.Map // statement text -> PostgreSQL's
}

// SQL returns q in this engine's spelling.
func (d *Dialect) SQL(q string) string {
	if !d.Postgres {
		return q
	}
	if s, ok := d.rewritten.Load(q); ok {
		return s.(string)
	}
	s := toPostgres(q)
	d.rewritten.Store(q, s)
	return s
}

// toPostgres rewrites one statement. The Store's statements hold no ?
// inside string literals, so every ? is a placeholder.
func toPostgres(q string) string {
	ignore := false
	if rest, ok := strings.CutPrefix(strings.TrimSpace(q), "INSERT OR IGNORE INTO"); ok {
		q, ignore = "INSERT INTO"+rest, true
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	if ignore {
		b.WriteString(" ON CONFLICT DO NOTHING")
	}
	return b.String()
}
